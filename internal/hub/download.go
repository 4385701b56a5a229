// download.go: resolving a revision, downloading one file into the cache
// (HEAD for its etag and size, GET with Range resume, verification, rename),
// and turning HTTP answers into errors a user can act on.

package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Snapshot makes sure every file of repo at rev (default "main") that want
// selects is in the cache, and returns the snapshot directory and the commit
// rev resolved to. Files already in the snapshot are not requested again: a
// commit's files never change.
//
// Every name from outside is checked before it is used (names.go): repo and
// rev, the file names want selects from the Hub's list, the commit, etags
// and redirect Locations; a name that breaks a rule fails the snapshot with
// an error wrapping ErrName. Error messages are bounded in length.
func (c *Client) Snapshot(ctx context.Context, repo, rev string, want func(string) bool) (dir, commit string, err error) {
	dir, commit, err = c.snapshot(ctx, repo, rev, want)
	return dir, commit, bound(err)
}

func (c *Client) snapshot(ctx context.Context, repo, rev string, want func(string) bool) (dir, commit string, err error) {
	if err := CheckRepoID(repo); err != nil {
		return "", "", fmt.Errorf("hub: %w", err)
	}
	if rev == "" {
		rev = "main"
	}
	if err := CheckRevision(rev); err != nil {
		return "", "", fmt.Errorf("hub: %w", err)
	}
	if want == nil {
		want = DefaultFiles
	}
	if c.Offline {
		return c.offlineSnapshot(repo, rev)
	}
	commit, files, err := c.revision(ctx, repo, rev)
	if err != nil {
		return "", "", err
	}
	var need []string
	for _, f := range files {
		if !want(f) {
			continue // never used: its name does not matter
		}
		if err := CheckFileName(f); err != nil {
			return "", "", fmt.Errorf("hub: the file list of %s at %s has a file draftd would download but cannot write as named: %w", repo, short(commit), err)
		}
		need = append(need, f)
	}
	slices.Sort(need)
	if !slices.Contains(need, "config.json") {
		return "", "", fmt.Errorf("hub: %s at %s has no config.json: not a transformers model repository", repo, short(commit))
	}
	if !slices.ContainsFunc(need, func(f string) bool { return strings.HasSuffix(f, ".safetensors") }) {
		return "", "", fmt.Errorf("hub: %s at %s has no *.safetensors weights (draftd does not read pytorch .bin files)", repo, short(commit))
	}
	for _, f := range need {
		if err := c.file(ctx, repo, commit, f); err != nil {
			return "", "", err
		}
	}
	if rev != commit {
		ref := filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(rev))
		if err := writeFileAtomic(ref, []byte(commit)); err != nil {
			return "", "", fmt.Errorf("hub: %w", err)
		}
	}
	return filepath.Join(c.RepoDir(repo), "snapshots", commit), commit, nil
}

// offlineSnapshot finds rev in the cache alone: a commit, or a ref file.
func (c *Client) offlineSnapshot(repo, rev string) (string, string, error) {
	commit := rev
	if !commitRE.MatchString(rev) {
		b, err := os.ReadFile(filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(rev)))
		if err != nil {
			return "", "", fmt.Errorf("hub: %s at %s: %w (no refs/%s under %s)", repo, rev, ErrOffline, rev, c.RepoDir(repo))
		}
		commit = strings.TrimSpace(string(b))
		if err := checkCommit(commit); err != nil {
			return "", "", fmt.Errorf("hub: %s at %s: the ref file refs/%s: %w", repo, rev, rev, err)
		}
	}
	dir := filepath.Join(c.RepoDir(repo), "snapshots", commit)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return "", "", fmt.Errorf("hub: %s at %s: %w (no %s)", repo, rev, ErrOffline, filepath.Join(dir, "config.json"))
	}
	return dir, commit, nil
}

// revision resolves rev to a commit and lists the repository's files there.
func (c *Client) revision(ctx context.Context, repo, rev string) (string, []string, error) {
	u := fmt.Sprintf("%s/api/models/%s/revision/%s", c.endpoint(), repo, url.PathEscape(rev))
	var info struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	err := c.retry(ctx, "resolve "+repo+"@"+rev, func() (bool, error) {
		resp, err := c.do(ctx, http.MethodGet, u, nil)
		if err != nil {
			return !errors.Is(err, ErrName), err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return retryable(resp.StatusCode), c.statusError(resp, repo, rev, "")
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
			return true, fmt.Errorf("hub: %s: bad revision answer: %v", u, err)
		}
		return false, nil
	})
	if err != nil {
		return "", nil, err
	}
	if err := checkCommit(info.SHA); err != nil {
		return "", nil, fmt.Errorf("hub: %s@%s resolved to %w", repo, rev, err)
	}
	if commitRE.MatchString(rev) && rev != info.SHA {
		return "", nil, fmt.Errorf("hub: asked for commit %s of %s, the Hub answered %s", rev, repo, info.SHA)
	}
	files := make([]string, len(info.Siblings))
	for i, s := range info.Siblings {
		files[i] = s.RFilename
	}
	return info.SHA, files, nil
}

// meta is what HEAD tells about one file at one commit.
type meta struct {
	commit string
	etag   string // sha256 (LFS) or git blob sha1, unquoted
	size   int64
}

// file puts repo's file name at commit into the cache.
func (c *Client) file(ctx context.Context, repo, commit, name string) error {
	rd := c.RepoDir(repo)
	link := filepath.Join(rd, "snapshots", commit, filepath.FromSlash(name))
	if _, err := os.Stat(link); err == nil {
		return nil // cached (a symlink to a blob that exists)
	}
	resolve := fmt.Sprintf("%s/%s/resolve/%s/%s", c.endpoint(), repo, commit, escapePath(name))
	m, err := c.head(ctx, resolve, repo, commit, name)
	if err != nil {
		return err
	}
	if m.commit != "" && m.commit != commit {
		return fmt.Errorf("hub: %s: the Hub answered for commit %s, not %s", resolve, quote(m.commit), commit)
	}
	blob := filepath.Join(rd, "blobs", m.etag)
	if st, err := os.Stat(blob); err != nil || st.Size() != m.size {
		if err := c.download(ctx, resolve, blob, name, m); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	os.Remove(link) // a dangling link left by a removed blob
	if err := os.Symlink(rel, link); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

// head asks for a file's etag and size without following a redirect to the
// CDN (the X-Linked-* headers are on the Hub's own answer).
func (c *Client) head(ctx context.Context, u, repo, commit, name string) (meta, error) {
	var m meta
	err := c.retry(ctx, "HEAD "+name, func() (bool, error) {
		target := u
		for range 5 { // relative redirects (a renamed repository) are followed
			resp, err := c.do(ctx, http.MethodHead, target, nil)
			if err != nil {
				return !errors.Is(err, ErrName), err
			}
			resp.Body.Close()
			if resp.StatusCode >= 300 && resp.StatusCode < 400 {
				raw := resp.Header.Get("Location")
				loc, err := resolveLocation(resp.Request.URL, raw)
				if err != nil {
					return false, fmt.Errorf("hub: %s: %w", name, err)
				}
				if rel, err := url.Parse(raw); err == nil && rel.Host == "" {
					target = loc.String()
					continue
				}
			} else if resp.StatusCode != http.StatusOK {
				return retryable(resp.StatusCode), c.statusError(resp, repo, commit, name)
			}
			h := resp.Header
			m.commit = h.Get("X-Repo-Commit")
			m.etag = normEtag(h.Get("X-Linked-Etag"))
			if m.etag == "" {
				m.etag = normEtag(h.Get("ETag"))
			}
			sz := h.Get("X-Linked-Size")
			if sz == "" {
				sz = h.Get("Content-Length")
			}
			m.size, err = strconv.ParseInt(sz, 10, 64)
			if err != nil || m.size < 0 {
				return false, fmt.Errorf("hub: %s: no usable size in the HTTP %d answer (X-Linked-Size/Content-Length %s)", quote(target), resp.StatusCode, quote(sz))
			}
			if err := checkEtag(m.etag); err != nil {
				return false, fmt.Errorf("hub: %s: no usable etag (X-Linked-Etag/ETag): %w", quote(target), err)
			}
			return false, nil
		}
		return false, fmt.Errorf("hub: %s: too many redirects", quote(u))
	})
	return m, err
}

// download fetches u into blob through blob.incomplete, resuming what a
// previous attempt (or run) left there, and verifies it against m.etag.
func (c *Client) download(ctx context.Context, u, blob, name string, m meta) error {
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	unlock, err := lockFile(filepath.Join(c.CacheDir, ".locks", filepath.Base(filepath.Dir(filepath.Dir(blob))), m.etag+".lock"))
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer unlock()
	if st, err := os.Stat(blob); err == nil && st.Size() == m.size {
		return nil // another process finished it while we waited
	}
	part := blob + ".incomplete"
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer f.Close()
	h := newHasher(m)
	have, err := io.Copy(h, f) // hash what is already there; leaves f at its end
	if err != nil {
		return fmt.Errorf("hub: read %s: %w", part, err)
	}
	if have > m.size {
		if err := restart(f, &have, &h, m); err != nil {
			return err
		}
	}
	if free, ok := freeSpace(filepath.Dir(blob)); ok && free < uint64(m.size-have) {
		return fmt.Errorf("hub: %s needs %d more bytes in %s, which has %d free: %w", name, m.size-have, filepath.Dir(blob), free, ErrDiskSpace)
	}
	p := c.newProgress(name, m.size, have)
	err = c.retry(ctx, "download "+name, func() (bool, error) {
		if have == m.size {
			return false, nil
		}
		hdr := http.Header{}
		if have > 0 {
			hdr.Set("Range", fmt.Sprintf("bytes=%d-", have))
		}
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.do(actx, http.MethodGet, u, hdr)
		if err != nil {
			return !errors.Is(err, ErrName), err
		}
		defer resp.Body.Close()
		body := c.watch(resp.Body, cancel)
		defer body.stop()
		switch {
		case resp.StatusCode == http.StatusPartialContent && have > 0:
			if !strings.HasPrefix(resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-", have)) {
				return false, fmt.Errorf("hub: %s: asked for bytes %d-, got range %s", name, have, quote(resp.Header.Get("Content-Range")))
			}
		case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
			// The server has nothing past what the part holds: the part is
			// not a prefix of this file (a leftover of another run or a
			// size the Hub got wrong). Discard it and start over.
			old := have
			if err := restart(f, &have, &h, m); err != nil {
				return false, err
			}
			return true, fmt.Errorf("hub: %s: the server has no bytes past %d of the %d announced (HTTP 416); discarded the partial download", name, old, m.size)
		case resp.StatusCode == http.StatusOK:
			if have > 0 { // the server ignored Range: start over
				if err := restart(f, &have, &h, m); err != nil {
					return false, err
				}
			}
		default:
			return retryable(resp.StatusCode), c.statusError(resp, "", "", name)
		}
		n, err := io.Copy(io.MultiWriter(f, h, p), io.LimitReader(body, m.size-have))
		have += n
		if err != nil {
			var werr *os.PathError
			if errors.As(err, &werr) { // our write failed, not the connection
				if errors.Is(err, syscall.ENOSPC) {
					return false, fmt.Errorf("hub: writing %s: %w (%v)", part, ErrDiskSpace, err)
				}
				return false, fmt.Errorf("hub: writing %s: %w", part, err)
			}
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return true, fmt.Errorf("hub: %s: connection dropped (or slower than %d bytes/s over %v) after %d of %d bytes: %w", name, c.minSpeed(), c.stall(), have, m.size, err)
		}
		if have < m.size {
			return true, fmt.Errorf("hub: %s: connection closed after %d of %d bytes", name, have, m.size)
		}
		return false, nil
	})
	p.done()
	if err != nil {
		return err // the .incomplete part stays for the next attempt to resume
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.etag {
		f.Close()
		os.Remove(part)
		return fmt.Errorf("hub: %s: %w: the Hub's etag is %s, the %d bytes downloaded hash to %s; removed the download, run again",
			name, ErrChecksum, m.etag, m.size, got)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(part, blob); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

// speedWatch is the low-speed limit of one download: it cancels the
// request (through cancel) when fewer than min bytes arrived in a window of
// d — nothing at all (a stall) or a drip.
type speedWatch struct {
	r       io.Reader
	n       atomic.Int64 // bytes read in this window
	min     int64
	d       time.Duration
	t       *time.Timer
	cancel  func()
	stopped atomic.Bool
}

func (c *Client) watch(r io.Reader, cancel func()) *speedWatch {
	d := c.stall()
	w := &speedWatch{r: r, min: max(1, c.minSpeed()*int64(d)/int64(time.Second)), d: d, cancel: cancel}
	w.t = time.AfterFunc(d, w.check)
	return w
}

func (w *speedWatch) check() {
	if w.stopped.Load() {
		return
	}
	if w.n.Swap(0) < w.min {
		w.cancel()
		return
	}
	w.t.Reset(w.d)
}

func (w *speedWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.n.Add(int64(n))
	return n, err
}

func (w *speedWatch) stop() {
	w.stopped.Store(true)
	w.t.Stop()
}

func (c *Client) stall() time.Duration {
	if c.StallTimeout > 0 {
		return c.StallTimeout
	}
	return time.Minute
}

func (c *Client) minSpeed() int64 {
	if c.MinSpeed > 0 {
		return c.MinSpeed
	}
	return 1000
}

// freeSpace reports the bytes available in a directory (a variable for tests).
var freeSpace = freeBytes

// restart empties a partial download.
func restart(f *os.File, have *int64, h *hash.Hash, m meta) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	*have, *h = 0, newHasher(m)
	return nil
}

// newHasher hashes the way the etag was made: sha256 of the contents for
// LFS files (64 hex digits), git's blob sha1 ("blob <size>\0" + contents)
// for the others (40).
func newHasher(m meta) hash.Hash {
	if len(m.etag) == 64 {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", m.size)
	return h
}

func normEtag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.ToLower(strings.Trim(s, `"`))
}

func (c *Client) endpoint() string {
	if c.Endpoint == "" {
		return DefaultEndpoint
	}
	return strings.TrimRight(c.Endpoint, "/")
}

func (c *Client) do(ctx context.Context, method, u string, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "draftd")
	req.Header.Set("Accept-Encoding", "identity")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	nc := *hc
	if method == http.MethodHead {
		nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	} else {
		nc.CheckRedirect = checkRedirect
	}
	hc = &nc
	return hc.Do(req)
}

// retry runs f until it succeeds, fails for good, or Retries retries of a
// retryable failure are spent, waiting Backoff, 2·Backoff, ... (≤ 30 s).
func (c *Client) retry(ctx context.Context, what string, f func() (retry bool, err error)) error {
	wait := c.Backoff
	for attempt := 0; ; attempt++ {
		again, err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !again || attempt >= c.Retries {
			if again {
				return fmt.Errorf("hub: %s: giving up after %d attempts: %w", what, attempt+1, err)
			}
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// statusError explains a non-success answer, using the Hub's X-Error-Code.
func (c *Client) statusError(resp *http.Response, repo, rev, name string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg = strings.TrimSpace(string(b))
	}
	if msg != "" {
		msg = quote(msg)
	}
	what := quote(resp.Request.URL.String())
	switch {
	case code == "RepoNotFound" && resp.StatusCode == http.StatusUnauthorized:
		// The Hub answers 401 for a repository it will not show to this caller.
		return fmt.Errorf("hub: repository %s: %w, or private: check the model id, or set HF_TOKEN to a token that can see it", orURL(repo, what), ErrNotFound)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || code == "GatedRepo":
		hint := "no HF_TOKEN is set"
		if c.Token != "" {
			hint = "the HF_TOKEN given has no access"
		}
		return fmt.Errorf("hub: %s (HTTP %d, %s): %w", orURL(repo, what), resp.StatusCode, hint, ErrAuth)
	case resp.StatusCode == http.StatusNotFound:
		switch {
		case code == "RepoNotFound" || (code == "" && name == "" && rev == ""):
			return fmt.Errorf("hub: repository %s: %w (check the model id)", orURL(repo, what), ErrNotFound)
		case code == "RevisionNotFound" || (name == "" && rev != ""):
			return fmt.Errorf("hub: revision %q of %s: %w (check --revision: a branch, tag or commit)", rev, repo, ErrNotFound)
		default:
			return fmt.Errorf("hub: file %s of %s at %s: %w", name, orURL(repo, what), short(rev), ErrNotFound)
		}
	}
	if msg != "" {
		msg = ": " + msg
	}
	return fmt.Errorf("hub: %s: HTTP %d%s", what, resp.StatusCode, msg)
}

func orURL(repo, u string) string {
	if repo != "" {
		return repo
	}
	return u
}

func short(commit string) string {
	if len(commit) == 40 {
		return commit[:12]
	}
	return commit
}

func escapePath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// writeFileAtomic writes data to path through a temporary file and rename.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
