package hub

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/hub/hubtest"
)

const tinyDir = "../../testdata/models/tiny-qwen2-bf16" // sharded: an index and three LFS files

func client(h *hubtest.Hub, t *testing.T) *Client {
	return &Client{Endpoint: h.URL, CacheDir: t.TempDir(), HTTP: h.Client(), Retries: 3, Backoff: time.Millisecond}
}

func isGET(r string) bool  { return strings.HasPrefix(r, "GET ") && !strings.HasPrefix(r, "GET /api/") }
func isHEAD(r string) bool { return strings.HasPrefix(r, "HEAD ") }

// checkSnapshot: every wanted file is in the snapshot with the source's
// bytes, as a relative symlink into blobs named by the file's etag.
func checkSnapshot(t *testing.T, c *Client, repo string, r *hubtest.Repo, dir string) {
	t.Helper()
	if want := filepath.Join(c.RepoDir(repo), "snapshots", r.Commit); dir != want {
		t.Errorf("snapshot dir %s; want %s", dir, want)
	}
	for name, data := range r.Files {
		p := filepath.Join(dir, name)
		if !DefaultFiles(name) {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s downloaded; draftd does not need it", name)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes (%v); want the source's %d", name, len(got), err, len(data))
		}
		target, err := os.Readlink(p)
		etag := hubtest.GitSHA1(data)
		if hubtest.IsLFS(name) {
			etag = hubtest.SHA256(data)
		}
		if err != nil || target != filepath.Join("..", "..", "blobs", etag) {
			t.Errorf("%s: link %q (%v); want ../../blobs/%s", name, target, err, etag)
		}
	}
	if b, err := os.ReadFile(filepath.Join(c.RepoDir(repo), "refs", "main")); err != nil || string(b) != r.Commit {
		t.Errorf("refs/main = %q (%v); want %s", b, err, r.Commit)
	}
}

// TestDownloadAndReuse: a fresh download fills the HF cache layout, taking
// each file once; a second run (and a new client on the same cache) asks
// only for the revision and downloads nothing; a cache Python filled (blobs
// present, no snapshot links) costs HEADs, no GETs.
func TestDownloadAndReuse(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	c := client(h, t)
	dir, commit, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if commit != r.Commit {
		t.Errorf("commit %s; want %s", commit, r.Commit)
	}
	checkSnapshot(t, c, "tiny/qwen2", r, dir)
	wanted := len(r.Files) - 1 // all but README.md
	if n := h.Count(isHEAD); n != wanted {
		t.Errorf("fresh: %d HEAD requests; want %d", n, wanted)
	}
	if n := h.Count(isGET); n != wanted+3 { // three LFS files: resolve 302 + CDN
		t.Errorf("fresh: %d GET requests; want %d (%v)", n, wanted+3, h.Requests)
	}

	h.Reset()
	c2 := client(h, t)
	c2.CacheDir = c.CacheDir
	if _, _, err := c2.Snapshot(context.Background(), "tiny/qwen2", "main", nil); err != nil {
		t.Fatal(err)
	}
	if n := h.Count(func(string) bool { return true }); n != 1 {
		t.Errorf("cached: %d requests (%v); want 1 (the revision)", n, h.Requests)
	}

	h.Reset()
	if err := os.RemoveAll(filepath.Join(c.RepoDir("tiny/qwen2"), "snapshots")); err != nil {
		t.Fatal(err)
	}
	dir, _, err = c2.Snapshot(context.Background(), "tiny/qwen2", "v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, c2, "tiny/qwen2", r, dir)
	if n := h.Count(isGET); n != 0 {
		t.Errorf("blobs cached: %d GET requests (%v); want 0", n, h.Requests)
	}
}

// TestResume: a connection dropped half-way through a file is resumed with
// Range from where it stopped, and so is a .incomplete file a killed run
// left behind; the result verifies.
func TestResume(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	name := "model-00001-of-00003.safetensors"
	data := r.Files[name]
	sum := hubtest.SHA256(data)
	half := int64(len(data) / 2)
	h.DropOnce[sum] = half
	c := client(h, t)
	dir, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, c, "tiny/qwen2", r, dir)
	want := "GET /cdn/" + sum + " bytes=" + itoa(half) + "-"
	if h.Count(func(s string) bool { return s == want }) != 1 {
		t.Errorf("no resumed request %q in %v", want, h.Requests)
	}

	// A run killed half-way leaves blobs/<sha>.incomplete; the next resumes it.
	c2 := client(h, t)
	blob := filepath.Join(c2.RepoDir("tiny/qwen2"), "blobs", sum)
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob+".incomplete", data[:1000], 0o644); err != nil {
		t.Fatal(err)
	}
	h.Reset()
	dir, _, err = c2.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, c2, "tiny/qwen2", r, dir)
	if want := "GET /cdn/" + sum + " bytes=1000-"; h.Count(func(s string) bool { return s == want }) != 1 {
		t.Errorf("no resumed request %q in %v", want, h.Requests)
	}
	if _, err := os.Stat(blob + ".incomplete"); !os.IsNotExist(err) {
		t.Errorf(".incomplete left behind: %v", err)
	}
}

// TestChecksumMismatch: bytes that do not hash to the Hub's etag are
// removed, nothing is linked, and the error names the file.
func TestChecksumMismatch(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	name := "model-00002-of-00003.safetensors"
	sum := hubtest.SHA256(r.Files[name])
	h.Corrupt[sum] = true
	c := client(h, t)
	_, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), name) {
		t.Fatalf("have %v; want ErrChecksum naming %s", err, name)
	}
	blobs := filepath.Join(c.RepoDir("tiny/qwen2"), "blobs")
	for _, p := range []string{filepath.Join(blobs, sum), filepath.Join(blobs, sum+".incomplete")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after a checksum mismatch", p)
		}
	}
	// Fixed on the server, the next run succeeds.
	delete(h.Corrupt, sum)
	dir, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, c, "tiny/qwen2", r, dir)
}

// TestGated: without a token a gated repository answers 401 and the error
// says what to do; with the token it downloads.
func TestGated(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "org/gated", tinyDir)
	h.Tokens["org/gated"] = "hf_secret"
	c := client(h, t)
	_, _, err := c.Snapshot(context.Background(), "org/gated", "", nil)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "HF_TOKEN") || !strings.Contains(err.Error(), "accept the license") {
		t.Fatalf("no token: have %v; want ErrAuth telling to accept the license and set HF_TOKEN", err)
	}
	c.Token = "hf_wrong"
	if _, _, err := c.Snapshot(context.Background(), "org/gated", "", nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong token: have %v; want ErrAuth", err)
	}
	c.Token = "hf_secret"
	dir, _, err := c.Snapshot(context.Background(), "org/gated", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, c, "org/gated", r, dir)
}

// TestNotFound: an unknown revision and an unknown repository are told
// apart.
func TestNotFound(t *testing.T) {
	h := hubtest.New(t)
	h.AddDir(t, "tiny/qwen2", tinyDir)
	c := client(h, t)
	_, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "no-such-branch", nil)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `revision "no-such-branch"`) {
		t.Errorf("unknown revision: have %v", err)
	}
	_, _, err = c.Snapshot(context.Background(), "tiny/nothing", "", nil)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "repository tiny/nothing") {
		t.Errorf("unknown repository: have %v", err)
	}
	if h.Count(isGET) != 0 {
		t.Errorf("files requested for a missing revision: %v", h.Requests)
	}
}

// TestOffline: with HF_HUB_OFFLINE nothing is requested; an empty cache is a
// clear error, a filled one answers by the ref or the commit.
func TestOffline(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	c := client(h, t)
	c.Offline = true
	if _, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil); !errors.Is(err, ErrOffline) {
		t.Errorf("offline, empty cache: have %v; want ErrOffline", err)
	}
	c.Offline = false
	if _, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil); err != nil {
		t.Fatal(err)
	}
	h.Reset()
	c.Offline = true
	for _, rev := range []string{"main", r.Commit} {
		dir, commit, err := c.Snapshot(context.Background(), "tiny/qwen2", rev, nil)
		if err != nil || commit != r.Commit {
			t.Fatalf("offline %s: %v, commit %s", rev, err, commit)
		}
		checkSnapshot(t, c, "tiny/qwen2", r, dir)
	}
	if _, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "v1", nil); !errors.Is(err, ErrOffline) {
		t.Errorf("offline, ref never resolved: have %v; want ErrOffline", err)
	}
	if n := h.Count(func(string) bool { return true }); n != 0 {
		t.Errorf("offline: %d requests: %v", n, h.Requests)
	}
}

// TestRetry: a busy Hub (503) is retried with backoff; past the retries the
// error says so.
func TestRetry(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	h.Fail503["/api/"] = 2
	h.Fail503["/cdn/"] = 2
	c := client(h, t)
	dir, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, c, "tiny/qwen2", r, dir)
	h.Fail503["/api/"] = 10
	c.Retries = 2
	if _, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil); err == nil || !strings.Contains(err.Error(), "giving up after 3 attempts") {
		t.Errorf("have %v; want giving up after 3 attempts", err)
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct{ in, repo, rev string }{
		{"Qwen/Qwen3-1.7B", "Qwen/Qwen3-1.7B", ""},
		{"Qwen/Qwen3-1.7B@main", "Qwen/Qwen3-1.7B", "main"},
		{"a/b@0123456789abcdef0123456789abcdef01234567", "a/b", "0123456789abcdef0123456789abcdef01234567"},
	} {
		repo, rev, err := ParseRef(tc.in)
		if err != nil || repo != tc.repo || rev != tc.rev {
			t.Errorf("%q: have %q %q %v; want %q %q", tc.in, repo, rev, err, tc.repo, tc.rev)
		}
	}
	for _, bad := range []string{"Qwen3", "a/b/c", "../x", "a/b@", "/b", "a/.."} {
		if _, _, err := ParseRef(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestProgress: with a Progress writer each downloaded file gets a line with
// its name, sizes, rate and ETA; without one nothing is drawn.
func TestProgress(t *testing.T) {
	h := hubtest.New(t)
	h.AddDir(t, "tiny/qwen2", tinyDir)
	c := client(h, t)
	var buf bytes.Buffer
	c.Progress = &buf
	if _, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"model-00001-of-00003.safetensors", "config.json", "MB/s", "ETA"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q:\n%s", want, out)
		}
	}
}

// TestDiskFull: a file that does not fit the free space fails before
// downloading, saying how much is needed where.
func TestDiskFull(t *testing.T) {
	h := hubtest.New(t)
	h.AddDir(t, "tiny/qwen2", tinyDir)
	c := client(h, t)
	old := freeSpace
	freeSpace = func(string) (uint64, bool) { return 100, true }
	defer func() { freeSpace = old }()
	_, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if !errors.Is(err, ErrDiskSpace) || !strings.Contains(err.Error(), "which has 100 free") {
		t.Fatalf("have %v; want ErrDiskSpace with the free bytes", err)
	}
	if n := h.Count(func(s string) bool { return strings.HasPrefix(s, "GET /cdn/") }); n != 0 {
		t.Errorf("%d large-file downloads started on a full disk", n)
	}
}

// TestStall: a download that stops receiving bytes is dropped after
// StallTimeout and resumed with Range.
func TestStall(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	data := r.Files["model-00003-of-00003.safetensors"]
	sum := hubtest.SHA256(data)
	h.StallOnce[sum] = 4096
	c := client(h, t)
	c.StallTimeout = 50 * time.Millisecond
	dir, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, c, "tiny/qwen2", r, dir)
	if want := "GET /cdn/" + sum + " bytes=4096-"; h.Count(func(s string) bool { return s == want }) != 1 {
		t.Errorf("no resumed request %q in %v", want, h.Requests)
	}
}
