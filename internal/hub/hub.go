// Package hub downloads model files from the Hugging Face Hub at a pinned
// revision into the standard Hugging Face cache layout, so that files the
// Python tools (huggingface_hub, transformers) downloaded are reused and the
// reverse:
//
//	$HF_HUB_CACHE/models--Org--Name/
//	  refs/main                    the commit "main" resolved to
//	  blobs/<etag>                 file contents, named by sha256 (LFS) or git blob sha1
//	  snapshots/<commit>/<file>    relative symlinks into ../../blobs
//
// The revision (branch, tag or commit) is resolved to a commit once, from
// api/models/{repo}/revision/{rev}, and every file is then taken at that
// commit with HEAD/GET on {endpoint}/{repo}/resolve/{commit}/{file}
// (X-Repo-Commit, X-Linked-Etag, X-Linked-Size; large files redirect to a
// CDN). Downloads go to blobs/<etag>.incomplete, resume with Range after a
// dropped connection, are verified against the etag (sha256 for LFS files,
// git's blob sha1 otherwise) and only then renamed into place. It is not a
// model reader and it never uploads.
package hub

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultEndpoint is the public Hub.
const DefaultEndpoint = "https://huggingface.co"

// Client downloads from one Hub endpoint into one cache.
type Client struct {
	Endpoint string // HF_ENDPOINT; default DefaultEndpoint
	Token    string // HF_TOKEN (sent as a Bearer token); empty: anonymous
	CacheDir string // HF_HUB_CACHE; default $HF_HOME/hub
	Offline  bool   // HF_HUB_OFFLINE: use only the cache, never the network

	HTTP *http.Client
	// Progress, when non-nil, receives one progress line per file (bytes,
	// rate, ETA), redrawn in place; nil is quiet.
	Progress ProgressWriter
	// Retries is how many times a failed request or a dropped download is
	// retried, waiting Backoff, then twice as long each time (at most 30 s).
	Retries int
	Backoff time.Duration
	// StallTimeout and MinSpeed are the low-speed limit (curl's
	// --speed-time and --speed-limit): a download that receives fewer than
	// MinSpeed bytes per second, averaged over StallTimeout, is dropped and
	// retried, resuming. 0 means one minute and 1,000 bytes/s.
	StallTimeout time.Duration
	MinSpeed     int64
}

// ProgressWriter is where progress lines go (a terminal).
type ProgressWriter interface{ Write(p []byte) (int, error) }

// FromEnv configures a client from the environment as huggingface_hub does:
// HF_ENDPOINT, HF_TOKEN (else the token file $HF_HOME/token that
// `huggingface-cli login` writes), HF_HOME (default $XDG_CACHE_HOME/huggingface
// or ~/.cache/huggingface), HF_HUB_CACHE (default $HF_HOME/hub) and
// HF_HUB_OFFLINE (1, ON, YES or TRUE).
func FromEnv() *Client {
	c := &Client{
		Endpoint: strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/"),
		Token:    os.Getenv("HF_TOKEN"),
		CacheDir: os.Getenv("HF_HUB_CACHE"),
		Offline:  truthy(os.Getenv("HF_HUB_OFFLINE")),
		HTTP: &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: time.Minute,
		}},
		Retries: 5,
		Backoff: time.Second,
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	home := HFHome()
	if c.Token == "" {
		if b, err := os.ReadFile(filepath.Join(home, "token")); err == nil {
			c.Token = strings.TrimSpace(string(b))
		}
	}
	if c.CacheDir == "" {
		c.CacheDir = os.Getenv("HUGGINGFACE_HUB_CACHE") // the older name
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(home, "hub")
	}
	return c
}

// HFHome is $HF_HOME, or $XDG_CACHE_HOME/huggingface, or ~/.cache/huggingface.
func HFHome() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return h
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "huggingface")
}

func truthy(s string) bool {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// ParseRef splits "Org/Name[@rev]" into the repo id and revision ("" when
// absent).
func ParseRef(s string) (repo, rev string, err error) {
	repo, rev, _ = strings.Cut(s, "@")
	if err := CheckRepoID(repo); err != nil {
		return "", "", fmt.Errorf("%s is not a Hugging Face model id (Org/Name, optionally @revision): %w", quote(s), err)
	}
	if strings.Contains(s, "@") && rev == "" {
		return "", "", fmt.Errorf("%s: empty revision after @", quote(s))
	}
	if rev != "" {
		if err := CheckRevision(rev); err != nil {
			return "", "", err
		}
	}
	return repo, rev, nil
}

// RepoDir is the cache directory of repo: models--Org--Name.
func (c *Client) RepoDir(repo string) string {
	return filepath.Join(c.CacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// Errors a caller can test with errors.Is.
var (
	ErrAuth      = errors.New("gated or private: accept the license on the model page and set HF_TOKEN")
	ErrNotFound  = errors.New("not found on the Hub")
	ErrOffline   = errors.New("offline (HF_HUB_OFFLINE is set) and not in the cache")
	ErrChecksum  = errors.New("checksum mismatch")
	ErrDiskSpace = errors.New("not enough disk space")
)

// DefaultFiles selects the files draftd needs from a model repository:
// config.json, generation_config.json, the tokenizer files, the chat
// template, and the safetensors weights with their index.
func DefaultFiles(name string) bool {
	switch name {
	case "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"chat_template.jinja", "model.safetensors.index.json":
		return true
	}
	return !strings.Contains(name, "/") && strings.HasSuffix(name, ".safetensors")
}
