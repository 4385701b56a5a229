// Tests of a hostile Hub (issue 20): names from outside — revisions, repo
// ids, the Hub's file list, redirect Locations, etags — that would write
// outside the cache or into unusable paths are refused with an error naming
// the rule; a redirect to anything but http(s) is refused at once; a
// download that drips bytes is dropped by the low-speed limit and resumed;
// a leftover .incomplete that cannot be resumed is discarded.

package hub

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/hub/hubtest"
)

// deepCache is a client whose cache lies eight directories below a fresh
// temporary directory, so that a path escaping the cache by a few ".." lands
// where outsideCache sees it.
func deepCache(h *hubtest.Hub, t *testing.T) (c *Client, top string) {
	top = t.TempDir()
	c = client(h, t)
	c.CacheDir = filepath.Join(top, "a", "b", "c", "d", "e", "f", "g", "h", "cache")
	if err := os.MkdirAll(c.CacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return c, top
}

// outsideCache lists what exists under top but outside c.CacheDir (and is
// not one of its parent directories).
func outsideCache(t *testing.T, c *Client, top string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == top {
			return nil
		}
		if p == c.CacheDir || strings.HasPrefix(p, c.CacheDir+string(filepath.Separator)) {
			return nil
		}
		if d.IsDir() && strings.HasPrefix(c.CacheDir, p+string(filepath.Separator)) {
			return nil // a parent of the cache
		}
		out = append(out, p)
		return nil
	})
	return out
}

func TestRevisionNames(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	h.AnyRevision = true // a Hub that answers any revision
	for _, rev := range []string{
		"../../../../x", "../../../../../../../../../../x", "a/../../../b", "..", ".", "refs/./x",
		"/abs", "a//b", "a/", ".hidden", "x\x00y", "tab\tname", `back\slash`, "sp ace", "a:b",
		strings.Repeat("r", MaxRevisionLen+1),
	} {
		c, top := deepCache(h, t)
		_, _, err := c.Snapshot(context.Background(), "tiny/qwen2", rev, nil)
		if !errors.Is(err, ErrName) || !strings.Contains(err.Error(), "revision") {
			t.Errorf("revision %q: have %v; want ErrName saying which rule the revision breaks", rev, err)
		} else if len(err.Error()) > 400 {
			t.Errorf("revision %q: %d-byte error", rev[:min(len(rev), 20)], len(err.Error()))
		}
		if out := outsideCache(t, c, top); len(out) > 0 {
			t.Errorf("revision %q created %v outside the cache", rev, out)
		}
		c.Offline = true
		if _, _, err := c.Snapshot(context.Background(), "tiny/qwen2", rev, nil); !errors.Is(err, ErrName) {
			t.Errorf("offline, revision %q: have %v; want ErrName", rev, err)
		}
	}
	// Branch and tag names with slashes and dots are fine, and land under refs/.
	for _, rev := range []string{"refs/pr/1", "v1.0", "release/2024-01_a", r.Commit} {
		c, top := deepCache(h, t)
		if _, _, err := c.Snapshot(context.Background(), "tiny/qwen2", rev, nil); err != nil {
			t.Errorf("revision %q: %v", rev, err)
			continue
		}
		if out := outsideCache(t, c, top); len(out) > 0 {
			t.Errorf("revision %q created %v outside the cache", rev, out)
		}
		if rev == r.Commit {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(c.RepoDir("tiny/qwen2"), "refs", filepath.FromSlash(rev))); err != nil || string(b) != r.Commit {
			t.Errorf("refs/%s = %q (%v); want %s", rev, b, err, r.Commit)
		}
	}
}

func TestRepoIDNames(t *testing.T) {
	for _, bad := range []string{
		"a--b/c", "a/b--c", "a/b.", "a/-b", "a/b-", "a/b c", "a/b%2e", `a\b/c`, "a/b\x00",
		"a/" + strings.Repeat("n", MaxRepoIDLen), "a/b.git/..", "./b", "a/.b",
	} {
		_, _, err := ParseRef(bad)
		if err == nil {
			t.Errorf("ParseRef(%q): no error", bad)
		} else if !strings.Contains(err.Error(), "model id") {
			t.Errorf("ParseRef(%q): %v; want the model id rule", bad, err)
		}
		c := &Client{CacheDir: t.TempDir(), Endpoint: "http://127.0.0.1:1"}
		if _, _, err := c.Snapshot(context.Background(), bad, "", nil); !errors.Is(err, ErrName) {
			t.Errorf("Snapshot(%q): have %v; want ErrName", bad, err)
		}
	}
	for _, good := range []string{"Qwen/Qwen3-1.7B", "a/b", "org_x/model.v2", "HuggingFaceTB/SmolLM2-135M-Instruct"} {
		if _, _, err := ParseRef(good); err != nil {
			t.Errorf("ParseRef(%q): %v", good, err)
		}
	}
	if _, _, err := ParseRef("a/b@../../x"); err == nil || !strings.Contains(err.Error(), "revision") {
		t.Errorf("ParseRef with a revision that climbs out: %v; want the revision rule", err)
	}
}

// TestFileListNames: names in the Hub's file list that draftd would
// download but cannot write as themselves fail the snapshot, naming the
// file and the rule; nothing of them is written.
func TestFileListNames(t *testing.T) {
	for _, name := range []string{
		`..\..\x.safetensors`, "%2e%2e%2fx.safetensors", ".safetensors", "a\x00b.safetensors",
		strings.Repeat("w", 300) + ".safetensors", "sp ace.safetensors", "new\nline.safetensors",
	} {
		h := hubtest.New(t)
		r := h.AddDir(t, "tiny/qwen2", tinyDir)
		r.Files[name] = []byte("not weights")
		c, top := deepCache(h, t)
		_, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
		if !errors.Is(err, ErrName) || !strings.Contains(err.Error(), "file name") {
			t.Errorf("file %q: have %v; want ErrName naming the file-name rule", name, err)
		} else if len(err.Error()) > 400 {
			t.Errorf("file %q: %d-byte error", name[:10], len(err.Error()))
		}
		if out := outsideCache(t, c, top); len(out) > 0 {
			t.Errorf("file %q: created %v outside the cache", name, out)
		}
		if n := h.Count(func(s string) bool { return isHEAD(s) || isGET(s) }); n != 0 {
			t.Errorf("file %q: %d file requests before the list was checked", name, n)
		}
	}
	// Names draftd does not want are never used, so they do not matter.
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	r.Files["../../README.md"] = []byte("x")
	r.Files["sub dir/notes.txt"] = []byte("x")
	c, top := deepCache(h, t)
	dir, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	delete(r.Files, "../../README.md")
	delete(r.Files, "sub dir/notes.txt")
	checkSnapshot(t, c, "tiny/qwen2", r, dir)
	if out := outsideCache(t, c, top); len(out) > 0 {
		t.Errorf("created %v outside the cache", out)
	}
}

// TestRedirectScheme: a redirect to anything but http or https is refused
// at once (not retried), naming the rule.
func TestRedirectScheme(t *testing.T) {
	for _, loc := range []string{"file:///etc/passwd", "ftp://example.com/x", "gopher:x", "//" + strings.Repeat("h", 300)} {
		h := hubtest.New(t)
		r := h.AddDir(t, "tiny/qwen2", tinyDir)
		h.Location["config.json"] = loc
		c := client(h, t)
		c.Retries = 3
		_, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
		if err == nil {
			t.Errorf("Location %.20q: no error", loc)
			continue
		}
		if len(err.Error()) > 400 {
			t.Errorf("Location %.20q: %d-byte error", loc, len(err.Error()))
		}
		if strings.HasPrefix(loc, "//") {
			// An http URL on another host: the redirect answer itself is
			// the file's metadata, and it has none.
			continue
		}
		if !errors.Is(err, ErrName) || !strings.Contains(err.Error(), "only http and https") {
			t.Errorf("Location %q: have %v; want ErrName: only http and https", loc, err)
		}
		if n := h.Count(func(s string) bool { return s == "HEAD /tiny/qwen2/resolve/"+r.Commit+"/config.json" }); n != 1 {
			t.Errorf("Location %q: config.json asked %d times; want once (not retried)", loc, n)
		}
	}
}

// TestEtagNames: etags are blob names; anything but 40 or 64 hex digits is
// refused before it touches the file system.
func TestEtagNames(t *testing.T) {
	for _, etag := range []string{`"../../../../x"`, `"` + strings.Repeat("a", 40) + `/x"`, `"` + strings.Repeat("g", 64) + `"`, `""`, strings.Repeat("e", 10000)} {
		h := hubtest.New(t)
		h.AddDir(t, "tiny/qwen2", tinyDir)
		h.Etag["model-00001-of-00003.safetensors"] = etag
		c, top := deepCache(h, t)
		_, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
		if err == nil || !strings.Contains(err.Error(), "etag") {
			t.Errorf("etag %.20q: have %v; want a refused etag", etag, err)
		} else if len(err.Error()) > 400 {
			t.Errorf("etag %.20q: %d-byte error", etag, len(err.Error()))
		}
		if out := outsideCache(t, c, top); len(out) > 0 {
			t.Errorf("etag %.20q: created %v outside the cache", etag, out)
		}
	}
}

// TestLowSpeed: a download that keeps receiving bytes, too slowly, is
// dropped by the low-speed limit and resumed with Range.
func TestLowSpeed(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	data := r.Files["model-00003-of-00003.safetensors"]
	sum := hubtest.SHA256(data)
	h.DripOnce[sum] = 2 * time.Millisecond // ≤ 500 bytes/s: 65 KB would take minutes
	c := client(h, t)
	c.StallTimeout = 100 * time.Millisecond
	c.MinSpeed = 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir, _, err := c.Snapshot(ctx, "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatalf("have %v; want the dripping download dropped and resumed", err)
	}
	checkSnapshot(t, c, "tiny/qwen2", r, dir)
	if n := h.Count(func(s string) bool { return strings.HasPrefix(s, "GET /cdn/"+sum+" bytes=") }); n != 1 {
		t.Errorf("%d resumed requests for the dripped file in %v; want 1", n, h.Requests)
	}
}

// TestIncompleteTooLarge: a leftover .incomplete larger than the file is
// discarded and the file downloaded afresh; so is one the server cannot
// resume (HTTP 416).
func TestIncompleteTooLarge(t *testing.T) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen2", tinyDir)
	name := "model-00002-of-00003.safetensors"
	data := r.Files[name]
	sum := hubtest.SHA256(data)
	c := client(h, t)
	blob := filepath.Join(c.RepoDir("tiny/qwen2"), "blobs", sum)
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob+".incomplete", append(append([]byte(nil), data...), make([]byte, 500)...), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, _, err := c.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatalf("a too-large .incomplete: %v", err)
	}
	checkSnapshot(t, c, "tiny/qwen2", r, dir)

	// A Hub whose X-Linked-Size exceeds what its CDN holds: the resumed
	// request is answered 416; the part is discarded and the error says
	// what is wrong. Once the Hub is fixed, the next run succeeds.
	c2 := client(h, t)
	h.LinkedSize[name] = int64(len(data)) + 100
	_, _, err = c2.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("size larger than the file: have %v; want an error naming %s", err, name)
	}
	t.Logf("size larger than the file: %v", err)
	blob2 := filepath.Join(c2.RepoDir("tiny/qwen2"), "blobs", sum)
	if st, err := os.Stat(blob2 + ".incomplete"); err == nil && st.Size() >= int64(len(data)) {
		t.Errorf(".incomplete of %d bytes kept: every rerun would ask for bytes past the end", st.Size())
	}
	delete(h.LinkedSize, name)
	dir, _, err = c2.Snapshot(context.Background(), "tiny/qwen2", "", nil)
	if err != nil {
		t.Fatalf("after the Hub is fixed: %v", err)
	}
	checkSnapshot(t, c2, "tiny/qwen2", r, dir)
}
