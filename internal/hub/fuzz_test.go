package hub

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/hub/hubtest"
)

// FuzzHubNames: whatever the user's repo id and revision and whatever a
// hostile Hub answers for one file of its list (its name, a redirect
// Location, an etag), Snapshot never panics, never creates anything outside
// the cache directory, returns a snapshot inside the cache when it succeeds,
// and bounds its error message.
func FuzzHubNames(f *testing.F) {
	lfs := "weights.safetensors"
	for _, s := range [][5]string{
		{"tiny/m", "main", lfs, "", ""},
		{"tiny/m", "refs/pr/1", "sub/tokenizer.json", "", ""},
		{"tiny/m", "../../../../x", `..\..\x.safetensors`, "", ""},
		{"tiny/m", "main", "%2e%2e%2fx.safetensors", "", ""},
		{"tiny/m", "main", ".safetensors", "", ""},
		{"tiny/m", "main", "a\x00b.json", "", ""},
		{"tiny/m", "main", "../x.json", "", ""},
		{"tiny/m", "main", "config2.json", "file:///etc/passwd", ""},
		{"tiny/m", "main", "config2.json", "../../../../../x", ""},
		{"tiny/m", "main", "config2.json", "/tiny/m/resolve/main/config.json", ""},
		{"tiny/m", "main", lfs, "", `"../../../../x"`},
		{"tiny/m", "main", "c.json", "", `W/"` + strings.Repeat("A", 40) + `"`},
		{"a--b/c", "main", lfs, "", ""},
		{"../x/y", "..", lfs, "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, repo, rev, name, location, etag string) {
		h := hubtest.New(t)
		h.AnyRevision = true
		files := map[string][]byte{
			"config.json":       []byte(`{"model_type":"qwen3"}`),
			"model.safetensors": []byte("weights"),
		}
		files[name] = []byte("file " + name)
		h.AddFiles(repo, files)
		if location != "" {
			h.Location[name] = location
		}
		if etag != "" {
			h.Etag[name] = etag
		}
		top := t.TempDir()
		// Every host dials the fake Hub: a fuzzed Location never reaches
		// the network.
		hub := h.Listener.Addr().String()
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", hub)
		}}
		defer tr.CloseIdleConnections()
		c := &Client{Endpoint: h.URL, HTTP: &http.Client{Transport: tr}, Backoff: time.Millisecond, StallTimeout: 10 * time.Second,
			CacheDir: filepath.Join(top, "a", "b", "c", "d", "e", "f", "g", "h", "cache")}
		if err := os.MkdirAll(c.CacheDir, 0o755); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		dir, _, err := c.Snapshot(ctx, repo, rev, func(string) bool { return true })
		if out := outsideCache(t, c, top); len(out) > 0 {
			t.Fatalf("repo %q rev %q file %q Location %q etag %q: created %v outside the cache (err %v)", repo, rev, name, location, etag, out, err)
		}
		if err != nil {
			if len(err.Error()) > maxErrorLen+64 {
				t.Fatalf("%d-byte error", len(err.Error()))
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("repo %q rev %q file %q Location %q etag %q: still running after 20 s", repo, rev, name, location, etag)
			}
			return
		}
		if !strings.HasPrefix(dir, c.CacheDir+string(filepath.Separator)) {
			t.Fatalf("snapshot %s outside the cache %s", dir, c.CacheDir)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("file %q accepted, but it lies at %s, outside the snapshot", name, p)
		}
		if b, err := os.ReadFile(p); err != nil || location == "" && string(b) != "file "+name {
			t.Fatalf("file %q: %q (%v)", name, b, err)
		}
	})
}
