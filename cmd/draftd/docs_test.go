package main

// The docs check: README.md, docs/**/*.md (docs/incoming/ excepted, the
// unmerged notes of other branches) and clients/**/*.md must agree with the
// repository and with the binary.
//
//   - Every relative link resolves to a file or directory inside the
//     repository, and every #anchor to a heading of the target page, by
//     GitHub's anchor rules (lower case; everything but letters, digits,
//     marks, '-', '_' and spaces dropped; spaces to '-'; a repeated heading
//     gets -1, -2, ...).
//   - Every command has one reference section, a heading that starts with
//     `draftd CMD`, whose table rows list its flags: exactly the flags of
//     `draftd CMD -h`, none missing and none unknown.
//   - Every command line the docs show — `draftd CMD ...` in a code block or
//     an inline code span — names a command that exists and only flags that
//     command has (not read in clients/, where `draftd` is the client
//     package).
//   - No page reads as a measurement diary ("third session: ...").
//   - No page names an issue ("issue 23", "issues 14 and 22", "#23"): a page
//     says what holds, not which change brought it (git keeps that).
//   - Nothing in the repository refers to the design notes outside it.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// helpMu serializes helpOutput's swaps of os.Stderr.
var helpMu sync.Mutex

// helpOutput runs `draftd args...` in this process and returns what it
// printed on stderr (the commands print their usage there).
func helpOutput(t *testing.T, args ...string) string {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, r); close(done) }()
	runErr := Run(context.Background(), args)
	os.Stderr = saved
	w.Close()
	<-done
	r.Close()
	if runErr != nil && len(args) > 0 {
		t.Fatalf("draftd %s: %v\n%s", strings.Join(args, " "), runErr, out.String())
	}
	return out.String()
}

var (
	commandLine = regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)  +\S`)
	flagLine    = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9-]*)`)
)

// cliFlags is every command of the binary and the flags of its -h.
func cliFlags(t *testing.T) map[string][]string {
	t.Helper()
	usage := helpOutput(t, "-h")
	cmds := map[string][]string{}
	for _, m := range commandLine.FindAllStringSubmatch(usage, -1) {
		help := helpOutput(t, m[1], "-h")
		var flags []string
		for _, f := range flagLine.FindAllStringSubmatch(help, -1) {
			flags = append(flags, f[1])
		}
		cmds[m[1]] = flags
	}
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in draftd -h; the usage format changed?\n%s", len(cmds), usage)
	}
	return cmds
}

// docPage is one Markdown file, split into what the checks read.
type docPage struct {
	path     string // relative to the repository, slash-separated
	lines    []string
	code     []bool     // lines[i] is inside a fenced code block (fences included)
	headings []heading  // in order
	anchors  setOfNames // GitHub anchors of the headings
}

type heading struct {
	line  int // index into lines
	level int
	text  string // raw text after the #s
}

type setOfNames map[string]bool

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	atxHeading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	codeSpan   = regexp.MustCompile("(`+)(.+?)(`+)")
	inlineLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	scheme     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

func readPage(t *testing.T, rel string) *docPage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	p := &docPage{path: rel, anchors: setOfNames{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		p.lines = append(p.lines, sc.Text())
	}
	inCode, marker := false, ""
	seen := map[string]int{}
	for i, l := range p.lines {
		if m := fence.FindStringSubmatch(l); m != nil {
			switch {
			case !inCode:
				inCode, marker = true, m[1]
			case m[1] == marker:
				inCode = false
				p.code = append(p.code, true)
				continue
			}
		}
		p.code = append(p.code, inCode)
		if inCode {
			continue
		}
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			p.headings = append(p.headings, heading{line: i, level: len(m[1]), text: m[2]})
			slug := githubSlug(m[2])
			if n := seen[slug]; n > 0 {
				p.anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				p.anchors[slug] = true
			}
			seen[slug]++
		}
	}
	return p
}

// githubSlug is the anchor GitHub gives a heading (before de-duplication):
// the heading's text as rendered (code spans, links and emphasis reduced to
// their text), lower case, with every character that is not a letter, a
// digit, a mark, '-', '_' or a space dropped and each space made a '-'.
func githubSlug(raw string) string {
	s := inlineLink.ReplaceAllString(raw, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	s = strings.NewReplacer("`", "", "*", "").Replace(s)
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Quick start", "quick-start"},
		{"`draftd serve`", "draftd-serve"},
		{"`POST /draft`: one draft", "post-draft-one-draft"},
		{"Errors (every code)", "errors-every-code"},
		{"τ, the mean acceptance length", "τ-the-mean-acceptance-length"},
		{"Zen 3 — AVX2, 2026-12-01", "zen-3--avx2-2026-12-01"},
		{"Limits & failures", "limits--failures"},
		{"[Protocol](protocol.md) v1", "protocol-v1"},
		{"snake_case *stays*", "snake_case-stays"},
	} {
		if have := githubSlug(tc.in); have != tc.want {
			t.Errorf("githubSlug(%q) = %q; want %q", tc.in, have, tc.want)
		}
	}
}

// docPages lists README.md, docs/**/*.md (docs/incoming/ excepted) and
// clients/**/*.md.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md"}
	for _, dir := range []string{"docs", "clients"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repoRoot, path)
			rel = filepath.ToSlash(rel)
			if d.IsDir() && (rel == "docs/incoming" || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(rel, ".md") {
				pages = append(pages, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(pages) < 2 {
		t.Fatal("no pages under docs/")
	}
	return pages
}

// blankCode replaces the code spans of a line by spaces, so that links
// shown as code are not taken for links.
func blankCode(l string) string {
	return codeSpan.ReplaceAllStringFunc(l, func(s string) string { return strings.Repeat(" ", len(s)) })
}

// checkLinks checks every relative link of one page given a reader of the
// other pages' anchors. It returns one message per broken link.
func checkLinks(p *docPage, pageOf func(rel string) *docPage) []string {
	var bad []string
	for i, l := range p.lines {
		if p.code[i] {
			continue
		}
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(blankCode(l), -1) {
			targets = append(targets, m[2])
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if msg := checkLink(p, target, pageOf); msg != "" {
				bad = append(bad, fmt.Sprintf("%s:%d: %s", p.path, i+1, msg))
			}
		}
	}
	return bad
}

func checkLink(p *docPage, target string, pageOf func(rel string) *docPage) string {
	if target == "" {
		return "empty link"
	}
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // absolute: not checked
	}
	path, anchor, _ := strings.Cut(target, "#")
	rel := p.path
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return fmt.Sprintf("link %q: use a path relative to the page", target)
		}
		rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.path), path)))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Sprintf("link %q leaves the repository", target)
		}
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel))); err != nil {
			return fmt.Sprintf("link %q: no file %s", target, rel)
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(rel, ".md") {
		return fmt.Sprintf("link %q: an anchor into %s, which is not a Markdown page", target, rel)
	}
	if !pageOf(rel).anchors[anchor] {
		return fmt.Sprintf("link %q: %s has no heading with the anchor #%s", target, rel, anchor)
	}
	return ""
}

var (
	sectionHeading = regexp.MustCompile("^`(?:\\./)?draftd ([a-z][a-z-]*)`")
	tableFlag      = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--?([a-z0-9][a-z0-9-]*)`)
	commandUse     = regexp.MustCompile(`(?:^|[\s/(\[])draftd\s+([a-z][a-z-]*)(.*)$`)
	shownFlag      = regexp.MustCompile(`(?:^|[\s\[(])--?([A-Za-z][A-Za-z0-9-]*)`)
	segmentSep     = regexp.MustCompile(` \| |&&|\|\||;|\$\(| #`)
	spanCommand    = regexp.MustCompile(`^\s*(?:\./)?draftd\s+[a-z]`)
	diaryEntry     = regexp.MustCompile(`(?i)\b(?:first|second|third|fourth|fifth|[0-9]+(?:st|nd|rd|th)) session\b`)
	issueRef       = regexp.MustCompile(`(?i)\bissues?\s+#?[0-9]+\b|(?:^|[\s(\[,;/])#[0-9]+\b`)
)

// issueRefs returns the issue references of one line: "issue 23", "issues
// 14", "#23". Link destinations are not read (a URL may hold a number after
// a '#'); link texts and code spans are.
func issueRefs(l string) []string {
	l = inlineLink.ReplaceAllString(l, "[$1]")
	return issueRef.FindAllString(l, -1)
}

// flagSections returns, for each command with a reference section in p, the
// flags its table rows list (the first cell of each row).
func flagSections(p *docPage) (map[string][]string, map[string]int) {
	sections, where := map[string][]string{}, map[string]int{}
	for hi, h := range p.headings {
		m := sectionHeading.FindStringSubmatch(h.text)
		if m == nil {
			continue
		}
		end := len(p.lines)
		for _, next := range p.headings[hi+1:] {
			if next.level <= h.level {
				end = next.line
				break
			}
		}
		flags := []string{}
		for i := h.line + 1; i < end; i++ {
			l := strings.TrimSpace(p.lines[i])
			if p.code[i] || !strings.HasPrefix(l, "|") {
				continue
			}
			cells := strings.Split(l, "|")
			if len(cells) < 3 || strings.Trim(cells[1], " -:") == "" {
				continue // the separator row
			}
			for _, f := range tableFlag.FindAllStringSubmatch(cells[1], -1) {
				flags = append(flags, f[1])
			}
		}
		sections[m[1]] = append(sections[m[1]], flags...)
		where[m[1]]++
	}
	return sections, where
}

// commandUses returns every `draftd CMD ...` the page shows, in code blocks
// (continuation lines joined) and in code spans, with its line number.
func commandUses(p *docPage) []shownCommand {
	var uses []shownCommand
	add := func(line int, text string) {
		for _, seg := range segmentSep.Split(text, -1) {
			m := commandUse.FindStringSubmatch(seg)
			if m == nil {
				continue
			}
			sc := shownCommand{line: line + 1, cmd: m[1], text: strings.TrimSpace(seg)}
			for _, f := range shownFlag.FindAllStringSubmatch(m[2], -1) {
				sc.flags = append(sc.flags, f[1])
			}
			uses = append(uses, sc)
		}
	}
	for i := 0; i < len(p.lines); i++ {
		if !p.code[i] {
			for _, m := range codeSpan.FindAllStringSubmatch(p.lines[i], -1) {
				if m[1] == m[3] && spanCommand.MatchString(m[2]) {
					add(i, strings.TrimSpace(m[2]))
				}
			}
			continue
		}
		if fence.MatchString(p.lines[i]) {
			continue
		}
		start, text := i, p.lines[i]
		for strings.HasSuffix(text, `\`) && i+1 < len(p.lines) && p.code[i+1] && !fence.MatchString(p.lines[i+1]) {
			i++
			text = strings.TrimSuffix(text, `\`) + " " + p.lines[i]
		}
		if t := strings.TrimSpace(text); strings.HasPrefix(t, "#") {
			continue // a comment line
		}
		add(start, text)
	}
	return uses
}

type shownCommand struct {
	line  int
	cmd   string
	text  string
	flags []string
}

// checkDocs runs every check over the pages and returns the problems found.
// pages maps each page's path to its content; cli is what the binary has.
func checkDocs(pages map[string]*docPage, cli map[string][]string) []string {
	var bad []string
	pageOf := func(rel string) *docPage {
		if p, ok := pages[rel]; ok {
			return p
		}
		return &docPage{anchors: setOfNames{}}
	}
	names := make([]string, 0, len(pages))
	for n := range pages {
		names = append(names, n)
	}
	sort.Strings(names)

	documented := map[string][]string{}
	sections := map[string][]string{}
	for _, n := range names {
		p := pages[n]
		bad = append(bad, checkLinks(p, pageOf)...)
		for i, l := range p.lines {
			if m := diaryEntry.FindString(l); m != "" {
				bad = append(bad, fmt.Sprintf("%s:%d: %q: a measurement diary; keep one current table per machine (git keeps the history)", n, i+1, m))
			}
			for _, m := range issueRefs(l) {
				bad = append(bad, fmt.Sprintf("%s:%d: %q: an issue number; say what holds, not which change brought it (git keeps that)", n, i+1, strings.TrimSpace(m)))
			}
		}
		if strings.HasPrefix(n, "clients/") {
			continue // the clients' pages show their own code, where `draftd` is a package, not the binary
		}
		secs, where := flagSections(p)
		for cmd, flags := range secs {
			documented[cmd] = append(documented[cmd], flags...)
			for range where[cmd] {
				sections[cmd] = append(sections[cmd], n)
			}
		}
		for _, u := range commandUses(p) {
			flags, ok := cli[u.cmd]
			if !ok {
				bad = append(bad, fmt.Sprintf("%s:%d: %q: draftd has no command %q", n, u.line, u.text, u.cmd))
				continue
			}
			for _, f := range u.flags {
				if f != "h" && f != "help" && !slices.Contains(flags, f) {
					bad = append(bad, fmt.Sprintf("%s:%d: %q: draftd %s has no flag --%s", n, u.line, u.text, u.cmd, f))
				}
			}
		}
	}
	cmds := make([]string, 0, len(cli))
	for c := range cli {
		cmds = append(cmds, c)
	}
	sort.Strings(cmds)
	for _, c := range cmds {
		switch len(sections[c]) {
		case 0:
			bad = append(bad, fmt.Sprintf("draftd %s has no reference section (a heading starting with `draftd %s` and a table of its flags)", c, c))
			continue
		case 1:
		default:
			bad = append(bad, fmt.Sprintf("draftd %s has %d reference sections (%s); want one", c, len(sections[c]), strings.Join(sections[c], ", ")))
		}
		for _, f := range cli[c] {
			if !slices.Contains(documented[c], f) {
				bad = append(bad, fmt.Sprintf("draftd %s --%s is not in its reference section (%s)", c, f, sections[c][0]))
			}
		}
	}
	var secCmds []string
	for c := range documented {
		secCmds = append(secCmds, c)
	}
	sort.Strings(secCmds)
	for _, c := range secCmds {
		flags, ok := cli[c]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: a reference section for draftd %s, which is no command", strings.Join(sections[c], ", "), c))
			continue
		}
		for _, f := range documented[c] {
			if !slices.Contains(flags, f) {
				bad = append(bad, fmt.Sprintf("%s: the reference section of draftd %s lists --%s, which draftd %s -h does not have", strings.Join(sections[c], ", "), c, f, c))
			}
		}
	}
	return bad
}

// loadPages reads every page the check covers.
func loadPages(t *testing.T) map[string]*docPage {
	t.Helper()
	pages := map[string]*docPage{}
	for _, rel := range docPages(t) {
		pages[rel] = readPage(t, rel)
	}
	return pages
}

// TestDocs is the docs check of the repository's own README and docs/.
func TestDocs(t *testing.T) {
	for _, msg := range checkDocs(loadPages(t), cliFlags(t)) {
		t.Error(msg)
	}
}

// TestDocsCheckFails makes sure the check finds what it is for: a broken
// link, a broken anchor, an undocumented flag, a flag or command that does
// not exist, each planted into a copy of the real pages.
func TestDocsCheckFails(t *testing.T) {
	cli := cliFlags(t)
	clean := checkDocs(loadPages(t), cli)
	for _, tc := range []struct {
		name string
		page string
		edit func(p *docPage)
		want string
	}{
		{"broken link", "README.md", func(p *docPage) {
			p.lines = append(p.lines, "", "See [nowhere](docs/no-such-page.md).")
			p.code = append(p.code, false, false)
		}, "no file docs/no-such-page.md"},
		{"broken anchor", "README.md", func(p *docPage) {
			p.lines = append(p.lines, "", "See [protocol](docs/protocol.md#no-such-heading).")
			p.code = append(p.code, false, false)
		}, "no heading with the anchor #no-such-heading"},
		{"link out of the repository", "docs/protocol.md", func(p *docPage) {
			p.lines = append(p.lines, "", "See [design](../../elsewhere/x.md).")
			p.code = append(p.code, false, false)
		}, "leaves the repository"},
		{"undocumented flag", "", func(p *docPage) {
			for i, l := range p.lines {
				if strings.HasPrefix(strings.TrimSpace(l), "| `--max-queue`") {
					p.lines[i] = "| (removed) | |"
				}
			}
		}, "draftd serve --max-queue is not in its reference section"},
		{"unknown flag in a command line", "README.md", func(p *docPage) {
			p.lines = append(p.lines, "```sh", "draftd serve --model m.gguf --no-such-flag 3", "```")
			p.code = append(p.code, true, true, true)
		}, "draftd serve has no flag --no-such-flag"},
		{"session diary", "docs/performance.md", func(p *docPage) {
			p.lines = append(p.lines, "", "| decode | 3rd session: 27.7 ms | now: 24.7 ms |")
			p.code = append(p.code, false, false)
		}, "a measurement diary"},
		{"issue number", "docs/performance.md", func(p *docPage) {
			p.lines = append(p.lines, "", "### Attention kernels (issue 23)")
			p.code = append(p.code, false, false)
		}, "an issue number"},
		{"issue reference with #", "clients/python/README.md", func(p *docPage) {
			p.lines = append(p.lines, "", "Sessions came with #22.")
			p.code = append(p.code, false, false)
		}, `"#22": an issue number`},
		{"unknown command", "README.md", func(p *docPage) {
			p.lines = append(p.lines, "", "Run `draftd frobnicate --x`.")
			p.code = append(p.code, false, false)
		}, `draftd has no command "frobnicate"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pages := loadPages(t)
			for rel, p := range pages {
				if tc.page == "" || rel == tc.page {
					tc.edit(p)
				}
			}
			found := false
			for _, msg := range checkDocs(pages, cli) {
				if strings.Contains(msg, tc.want) && !slices.Contains(clean, msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("the check did not report %q", tc.want)
			}
		})
	}
}

// TestNoReferenceOutsideRepo: no file of the repository points at the design
// notes the project was started from, which are not shipped with it.
func TestNoReferenceOutsideRepo(t *testing.T) {
	banned := []string{"../" + "shared", "DESIGN" + ".md", "DESIGN" + " §"}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch rel, _ := filepath.Rel(repoRoot, path); {
			case d.Name() == ".git", d.Name() == "node_modules":
				return filepath.SkipDir
			case filepath.ToSlash(rel) == "docs/incoming":
				return filepath.SkipDir // other branches' notes, merged by hand
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".py", ".js", ".mjs", ".sh", ".cfg", ".yaml", ".yml", ".toml", ".txt", "":
		default:
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 4<<20 {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, b := range banned {
			if i := bytes.Index(data, []byte(b)); i >= 0 {
				line := bytes.Count(data[:i], []byte("\n")) + 1
				rel, _ := filepath.Rel(repoRoot, path)
				t.Errorf("%s:%d refers to %q, outside the repository; point at docs/ instead", rel, line, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestIssueRefs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"Side by side with llama.cpp (issue 23)", 1},
		{"measured for issues 14 and 22", 1},
		{"Issue #7 fixed it; see #8.", 2},
		{"(#23)", 1},
		{"see [the notes](protocol.md#32-sessions)", 0},
		{"[upstream](https://github.com/ggml-org/llama.cpp/pull/10290#issuecomment-1)", 0},
		{"go.dev/issue/75804", 0},
		{"## Issue tracker", 0},
		{"C#1 and a #define", 0},
		{"the 1b. heading [x](#1b-batched)", 0},
	} {
		if have := len(issueRefs(tc.in)); have != tc.want {
			t.Errorf("issueRefs(%q) = %v; want %d", tc.in, issueRefs(tc.in), tc.want)
		}
	}
}
