package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHub is an httptest server speaking the Hub's download protocol:
//
//	GET  /api/models/{org}/{name}/revision/{rev}   {"sha", "siblings":[{"rfilename"}]}
//	HEAD /{org}/{name}/resolve/{rev}/{file}         X-Repo-Commit, ETag; LFS files
//	                                                (*.safetensors) also X-Linked-Etag
//	                                                (sha256), X-Linked-Size and a 302
//	                                                to /cdn/{sha256}
//	GET  the same                                   small files: the bytes; LFS: 302
//	GET  /cdn/{sha256}                              the bytes, with Range (206)
//
// Errors carry X-Error-Code as the Hub's do (RepoNotFound, RevisionNotFound,
// EntryNotFound, GatedRepo).
type fakeHub struct {
	*httptest.Server
	repos map[string]*fakeRepo

	mu       sync.Mutex
	requests []string          // "METHOD path [Range]"
	dropOnce map[string]int64  // file sha256 → cut the connection after this many bytes, once
	corrupt  map[string]bool   // file sha256 → serve flipped bytes
	fail503  map[string]int    // path prefix → answer 503 this many times
	tokens   map[string]string // repo → token required (gated)
}

type fakeRepo struct {
	commit string
	refs   map[string]string // branch/tag → commit
	files  map[string][]byte
}

func newFakeHub(t *testing.T) *fakeHub {
	h := &fakeHub{repos: map[string]*fakeRepo{}, dropOnce: map[string]int64{}, corrupt: map[string]bool{},
		fail503: map[string]int{}, tokens: map[string]string{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

// addDir serves every file of a local model directory as repo at one commit,
// reachable as main, v1 and the commit itself, plus a README.md that draftd
// must not download.
func (h *fakeHub) addDir(t *testing.T, repo, dir string) *fakeRepo {
	r := &fakeRepo{files: map[string][]byte{"README.md": []byte("# a model card\n")}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.New()
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		r.files[e.Name()] = b
		sum.Write(b)
	}
	r.commit = hex.EncodeToString(sum.Sum(nil))
	r.refs = map[string]string{"main": r.commit, "v1": r.commit, r.commit: r.commit}
	h.repos[repo] = r
	return r
}

func (h *fakeHub) count(pred func(string) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.requests {
		if pred(r) {
			n++
		}
	}
	return n
}

func (h *fakeHub) reset() {
	h.mu.Lock()
	h.requests = nil
	h.mu.Unlock()
}

func gitSHA1(b []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(b))
	s.Write(b)
	return hex.EncodeToString(s.Sum(nil))
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func isLFS(name string) bool { return strings.HasSuffix(name, ".safetensors") }

func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, msg, status)
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+r.Header.Get("Range")))
	for p, n := range h.fail503 {
		if n > 0 && strings.HasPrefix(r.URL.Path, p) {
			h.fail503[p] = n - 1
			h.mu.Unlock()
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
	}
	h.mu.Unlock()

	if sha, ok := strings.CutPrefix(r.URL.Path, "/cdn/"); ok {
		h.serveCDN(w, r, sha)
		return
	}
	var repoID, rest string
	api := false
	if p, ok := strings.CutPrefix(r.URL.Path, "/api/models/"); ok {
		org, p2, _ := strings.Cut(p, "/")
		name, p3, _ := strings.Cut(p2, "/")
		repoID, rest, api = org+"/"+name, p3, true
	} else {
		org, p2, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		name, p3, _ := strings.Cut(p2, "/")
		repoID, rest = org+"/"+name, p3
	}
	repo, ok := h.repos[repoID]
	if !ok {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository Not Found")
		return
	}
	if tok := h.tokens[repoID]; tok != "" && r.Header.Get("Authorization") != "Bearer "+tok {
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repoID+" is restricted.")
		return
	}
	if api {
		rev, ok := strings.CutPrefix(rest, "revision/")
		commit, known := repo.refs[rev]
		if !ok || !known {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
			return
		}
		var sib []map[string]string
		for name := range repo.files {
			sib = append(sib, map[string]string{"rfilename": name})
		}
		json.NewEncoder(w).Encode(map[string]any{"id": repoID, "sha": commit, "siblings": sib})
		return
	}
	p, ok := strings.CutPrefix(rest, "resolve/")
	rev, name, _ := strings.Cut(p, "/")
	commit, known := repo.refs[rev]
	if !ok || !known {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	data, ok := repo.files[name]
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if isLFS(name) {
		sum := sha256hex(data)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(data)))
		w.Header().Set("ETag", `"`+gitSHA1([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+sum))+`"`)
		w.Header().Set("Location", h.URL+"/cdn/"+sum)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitSHA1(data)+`"`)
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if r.Method == http.MethodGet {
		w.Write(data)
	}
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request, sum string) {
	var data []byte
	for _, repo := range h.repos {
		for name, b := range repo.files {
			if isLFS(name) && sha256hex(b) == sum {
				data = b
			}
		}
	}
	if data == nil {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	cut, drop := h.dropOnce[sum]
	delete(h.dropOnce, sum)
	if h.corrupt[sum] {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	h.mu.Unlock()
	if drop {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
	http.ServeContent(w, r, "", time.Time{}, strings.NewReader(string(data)))
}
