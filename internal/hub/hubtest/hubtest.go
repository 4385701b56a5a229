// Package hubtest is a fake Hugging Face Hub for tests: an httptest server
// speaking the Hub's download protocol over real sockets, serving local
// model directories. It is not a Hub implementation (no uploads, no search).
package hubtest

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
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hub is an httptest server speaking the Hub's download protocol:
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
type Hub struct {
	*httptest.Server
	repos map[string]*Repo

	mu sync.Mutex
	// Requests logs "METHOD path [Range]" of every request; the maps below
	// are knobs a test sets before the requests they affect.
	Requests  []string          // "METHOD path [Range]"
	DropOnce  map[string]int64  // file sha256 → cut the connection after this many bytes, once
	StallOnce map[string]int64  // file sha256 → send this many bytes, then nothing until the client gives up, once
	Corrupt   map[string]bool   // file sha256 → serve flipped bytes
	Fail503   map[string]int    // path prefix → answer 503 this many times
	Tokens    map[string]string // repo → token required (gated)
	// Gate, when set, holds every CDN (large file) request until it is closed.
	Gate chan struct{}

	// Hostile behaviours (issue 20), set before the requests they affect.
	AnyRevision bool                     // the revision API and resolve accept any revision as the repo's commit
	Location    map[string]string        // file name → HEAD and GET of it answer 302 with this Location (no X-Linked-*)
	Etag        map[string]string        // file name → the ETag (and, for LFS files, X-Linked-Etag) sent, verbatim
	LinkedSize  map[string]int64         // LFS file name → the X-Linked-Size sent instead of the true size
	DripOnce    map[string]time.Duration // file sha256 → send one byte per interval until the client gives up, once
	Overlong    map[string]int           // small file name → GET sends this many bytes past its Content-Length
}

// Repo is one served repository: its files at one commit, reachable by
// every name in Refs.
type Repo struct {
	Commit string
	Refs   map[string]string // branch/tag → commit
	Files  map[string][]byte
}

func New(t testing.TB) *Hub {
	h := &Hub{repos: map[string]*Repo{}, DropOnce: map[string]int64{}, StallOnce: map[string]int64{}, Corrupt: map[string]bool{},
		Fail503: map[string]int{}, Tokens: map[string]string{},
		Location: map[string]string{}, Etag: map[string]string{}, LinkedSize: map[string]int64{}, DripOnce: map[string]time.Duration{}, Overlong: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

// AddDir serves every file of a local model directory as repo at one commit,
// reachable as main, v1 and the commit itself, plus a README.md that draftd
// must not download.
func (h *Hub) AddDir(t testing.TB, repo, dir string) *Repo {
	r := &Repo{Files: map[string][]byte{"README.md": []byte("# a model card\n")}}
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
		r.Files[e.Name()] = b
		sum.Write(b)
	}
	r.Commit = hex.EncodeToString(sum.Sum(nil))
	r.Refs = map[string]string{"main": r.Commit, "v1": r.Commit, r.Commit: r.Commit}
	h.repos[repo] = r
	return r
}

// AddFiles serves files as repo at one commit (named by their contents),
// reachable as main and as the commit.
func (h *Hub) AddFiles(repo string, files map[string][]byte) *Repo {
	r := &Repo{Files: files}
	sum := sha1.New()
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(sum, "%d:%s:", len(name), name)
		sum.Write(files[name])
	}
	r.Commit = hex.EncodeToString(sum.Sum(nil))
	r.Refs = map[string]string{"main": r.Commit, r.Commit: r.Commit}
	h.mu.Lock()
	h.repos[repo] = r
	h.mu.Unlock()
	return r
}

// Count is the number of logged requests pred accepts.
func (h *Hub) Count(pred func(string) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.Requests {
		if pred(r) {
			n++
		}
	}
	return n
}

// Reset clears the request log.
func (h *Hub) Reset() {
	h.mu.Lock()
	h.Requests = nil
	h.mu.Unlock()
}

// GitSHA1 is git's blob id of b: the ETag of a small file.
func GitSHA1(b []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(b))
	s.Write(b)
	return hex.EncodeToString(s.Sum(nil))
}

// SHA256 is the hex sha256 of b: the X-Linked-Etag of an LFS file.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// IsLFS reports whether the fake stores name in LFS (*.safetensors).
func IsLFS(name string) bool { return strings.HasSuffix(name, ".safetensors") }

func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, msg, status)
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.Requests = append(h.Requests, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+r.Header.Get("Range")))
	for p, n := range h.Fail503 {
		if n > 0 && strings.HasPrefix(r.URL.Path, p) {
			h.Fail503[p] = n - 1
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
	if tok := h.Tokens[repoID]; tok != "" && r.Header.Get("Authorization") != "Bearer "+tok {
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repoID+" is restricted.")
		return
	}
	if api {
		rev, ok := strings.CutPrefix(rest, "revision/")
		commit, known := repo.Refs[rev]
		if h.AnyRevision {
			commit, known = repo.Commit, true
		}
		if !ok || !known {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
			return
		}
		var sib []map[string]string
		for name := range repo.Files {
			sib = append(sib, map[string]string{"rfilename": name})
		}
		json.NewEncoder(w).Encode(map[string]any{"id": repoID, "sha": commit, "siblings": sib})
		return
	}
	p, ok := strings.CutPrefix(rest, "resolve/")
	rev, name, _ := strings.Cut(p, "/")
	commit, known := repo.Refs[rev]
	if h.AnyRevision {
		commit, known = repo.Commit, true
	}
	if !ok || !known {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	data, ok := repo.Files[name]
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	h.mu.Lock()
	loc, redirect := h.Location[name]
	etag, setEtag := h.Etag[name]
	size, setSize := h.LinkedSize[name]
	extra := h.Overlong[name]
	h.mu.Unlock()
	w.Header().Set("X-Repo-Commit", commit)
	if redirect {
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusFound)
		return
	}
	if IsLFS(name) {
		sum := SHA256(data)
		if !setEtag {
			etag = `"` + sum + `"`
		}
		if !setSize {
			size = int64(len(data))
		}
		w.Header().Set("X-Linked-Etag", etag)
		w.Header().Set("X-Linked-Size", fmt.Sprint(size))
		w.Header().Set("ETag", `"`+GitSHA1([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+sum))+`"`)
		w.Header().Set("Location", h.URL+"/cdn/"+sum)
		w.WriteHeader(http.StatusFound)
		return
	}
	if !setEtag {
		etag = `"` + GitSHA1(data) + `"`
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if r.Method != http.MethodGet {
		return
	}
	if extra > 0 {
		// More bytes than the Content-Length: only a hijacked connection
		// can send them.
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nX-Repo-Commit: %s\r\nETag: %s\r\nContent-Length: %d\r\n\r\n", commit, etag, len(data))
		buf.Write(data)
		junk := make([]byte, extra)
		for i := range junk {
			junk[i] = byte(i*7 + 1)
		}
		buf.Write(junk)
		buf.Flush()
		// Keep the connection open until the client closes it, so that the
		// extra bytes arrive on a connection it holds as idle.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		conn.Read(make([]byte, 1))
		return
	}
	w.Write(data)
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request, sum string) {
	var data []byte
	for _, repo := range h.repos {
		for name, b := range repo.Files {
			if IsLFS(name) && SHA256(b) == sum {
				data = b
			}
		}
	}
	if data == nil {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	gate := h.Gate
	h.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	h.mu.Lock()
	cut, drop := h.DropOnce[sum]
	delete(h.DropOnce, sum)
	stallAt, stall := h.StallOnce[sum]
	delete(h.StallOnce, sum)
	drip, dripping := h.DripOnce[sum]
	delete(h.DripOnce, sum)
	if h.Corrupt[sum] {
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
	if stall {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:stallAt])
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the client's stall timeout cancels the request
		return
	}
	if dripping {
		// A byte at a time, never stalling: only a low-speed limit ends it.
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		t := time.NewTicker(drip)
		defer t.Stop()
		for i := range data {
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
			if _, err := w.Write(data[i : i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		return
	}
	http.ServeContent(w, r, "", time.Time{}, strings.NewReader(string(data)))
}
