// names.go: the rules every name from outside must pass before it is used
// in a path or a URL — the repo id and revision a user gives, the file
// names of the Hub's file list, the commit it answers, redirect Locations
// and the etags that name blobs — and the bounded quoting of outside text in
// error messages. It decides nothing about what to download.

package hub

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrName is wrapped by every refusal of a name from outside (a *NameError).
var ErrName = errors.New("unusable name")

// NameError is a name that breaks a rule; the message says which.
type NameError struct {
	Kind string // "model id", "revision", "file name", "redirect Location", "etag", "commit"
	Name string
	Rule string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Kind, quote(e.Name), e.Rule)
}

func (e *NameError) Unwrap() error { return ErrName }

// Limits of names from outside.
const (
	MaxRepoIDLen    = 96   // huggingface_hub's limit
	MaxRevisionLen  = 255  // a git ref component limit, for the whole revision
	MaxFileNameLen  = 1024 // a file path in a repository
	MaxNameSegment  = 255  // one component of a path (NAME_MAX)
	maxLocationLen  = 8192
	maxQuoted       = 96 // bytes of outside text an error message quotes
	maxRedirectHops = 10
)

// The rules, as the messages state them.
const (
	ruleRepoID = "a model id is Org/Name, together at most 96 bytes; each part starts with a letter or digit, " +
		"ends with a letter, digit or '_', and holds only letters, digits, '.', '_' and '-', with no '--' or '..'"
	ruleRevision = "a revision is a branch, tag or commit of at most 255 bytes: parts separated by single '/', " +
		"each of letters, digits, '.', '_' and '-', not starting with '.'"
	ruleFileName = "a file name draftd writes is at most 1024 bytes: parts separated by single '/', each 1-255 bytes " +
		"of letters, digits, '.', '_', '-' and '+', not starting with '.'"
	ruleEtag     = "an etag naming a blob is 40 (git sha1) or 64 (sha256) hex digits"
	ruleCommit   = "a commit is 40 lowercase hex digits"
	ruleLocation = "only http and https redirects with a host are followed"
)

var (
	repoPartRE    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9_])?$`)
	revPartRE     = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`)
	filePartRE    = regexp.MustCompile(`^[A-Za-z0-9_+-][A-Za-z0-9._+-]*$`)
	commitRE      = regexp.MustCompile(`^[0-9a-f]{40}$`)
	errRepoID     = func(s string) error { return &NameError{"model id", s, ruleRepoID} }
	errRevision   = func(s string) error { return &NameError{"revision", s, ruleRevision} }
	errFileName   = func(s string) error { return &NameError{"file name", s, ruleFileName} }
	errEtag       = func(s string) error { return &NameError{"etag", s, ruleEtag} }
	errCommitName = func(s string) error { return &NameError{"commit", s, ruleCommit} }
)

// CheckRepoID checks a Hub model id "Org/Name" (huggingface_hub's
// validate_repo_id rules, with the organisation required).
func CheckRepoID(s string) error {
	org, name, ok := strings.Cut(s, "/")
	if !ok || len(s) > MaxRepoIDLen || strings.Contains(s, "--") || strings.Contains(s, "..") ||
		!repoPartRE.MatchString(org) || !repoPartRE.MatchString(name) {
		return errRepoID(s)
	}
	return nil
}

// IsRepoID reports whether s is a valid Hub model id "Org/Name".
func IsRepoID(s string) bool { return CheckRepoID(s) == nil }

// CheckRevision checks a branch, tag or commit name before it becomes a
// URL and a file under refs/.
func CheckRevision(s string) error {
	if s == "" || len(s) > MaxRevisionLen || !filepath.IsLocal(filepath.FromSlash(s)) {
		return errRevision(s)
	}
	for _, p := range strings.Split(s, "/") {
		if !revPartRE.MatchString(p) || strings.Contains(p, "..") {
			return errRevision(s)
		}
	}
	return nil
}

// CheckFileName checks a file name of the Hub's file list that draftd is
// about to download into the snapshot.
func CheckFileName(s string) error {
	// filepath.IsLocal besides the characters: on Windows it also refuses
	// reserved names (NUL, CON, …).
	if s == "" || len(s) > MaxFileNameLen || !filepath.IsLocal(filepath.FromSlash(s)) {
		return errFileName(s)
	}
	for _, p := range strings.Split(s, "/") {
		if len(p) > MaxNameSegment || !filePartRE.MatchString(p) {
			return errFileName(s)
		}
	}
	return nil
}

// checkEtag checks a normalised etag before it names a blob.
func checkEtag(s string) error {
	if !validEtag(s) {
		return errEtag(s)
	}
	return nil
}

func validEtag(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkCommit checks a commit hash (from the Hub or a ref file) before it
// names a snapshot directory.
func checkCommit(s string) error {
	if !commitRE.MatchString(s) {
		return errCommitName(s)
	}
	return nil
}

// resolveLocation resolves a redirect's Location against the URL that
// answered it and allows only http and https targets with a host.
func resolveLocation(base *url.URL, loc string) (*url.URL, error) {
	bad := func() error { return &NameError{"redirect Location", loc, ruleLocation} }
	if loc == "" || len(loc) > maxLocationLen {
		return nil, bad()
	}
	u, err := url.Parse(loc)
	if err != nil {
		return nil, bad()
	}
	if base != nil {
		u = base.ResolveReference(u)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, bad()
	}
	return u, nil
}

// checkRedirect is the http.Client's CheckRedirect for downloads: only
// http(s), at most maxRedirectHops.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirectHops {
		return fmt.Errorf("hub: %s: more than %d redirects", quote(via[0].URL.String()), maxRedirectHops)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" || req.URL.Host == "" {
		return &NameError{"redirect Location", req.URL.String(), ruleLocation}
	}
	return nil
}

// boundedError keeps an error's chain with its message cut to maxErrorLen
// bytes: the one bound on what Snapshot reports, whatever outside text the
// error quotes.
type boundedError struct {
	msg string
	err error
}

const maxErrorLen = 1024

func (e *boundedError) Error() string { return e.msg }
func (e *boundedError) Unwrap() error { return e.err }

func bound(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if len(msg) <= maxErrorLen && utf8.ValidString(msg) {
		return err
	}
	msg = strings.ToValidUTF8(msg, "\ufffd")
	if len(msg) > maxErrorLen {
		i := maxErrorLen
		for i > 0 && !utf8.RuneStart(msg[i]) {
			i--
		}
		msg = msg[:i] + "… (" + strconv.Itoa(len(err.Error())) + " bytes)"
	}
	return &boundedError{msg: msg, err: err}
}

// quote quotes outside text for an error message: Go-quoted (control and
// invalid bytes escaped), at most maxQuoted bytes of it, with its length
// when cut.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	i := maxQuoted
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strconv.Quote(s[:i]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
