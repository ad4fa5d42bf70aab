// Package docs holds goroce's documentation; its test checks that the
// documents' links, and the documents the code's comments name, exist.
package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, the test's working directory being docs/.
const root = ".."

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeDoc = regexp.MustCompile(`\bdocs/[A-Za-z0-9_/]+\.md\b`)
)

// markdown returns the repository's Markdown files (README.md and docs/),
// relative to root.
func markdown(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := fs.WalkDir(os.DirFS(root), "docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// slug is GitHub's anchor for a heading: lower case, spaces to hyphens,
// every character but letters, digits, '-' and '_' dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// scan returns a Markdown file's anchors and its links, leaving out
// fenced code blocks.
func scan(t *testing.T, file string) (anchors map[string]bool, links []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors = map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") {
			s := slug(h)
			if n := seen[s]; n > 0 {
				anchors[s+"-"+strconv.Itoa(n)] = true // GitHub numbers repeated headings
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			links = append(links, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors, links
}

// TestLinks checks every relative link of README.md and docs/: the file
// it names exists, and so does the heading its fragment names.
func TestLinks(t *testing.T) {
	files := markdown(t)
	anchors := map[string]map[string]bool{}
	links := map[string][]string{}
	for _, f := range files {
		anchors[f], links[f] = scan(t, f)
	}
	checked := 0
	for _, f := range files {
		for _, l := range links[f] {
			if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(l, "#")
			file := f
			if target != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(f), target))
				if _, err := os.Stat(filepath.Join(root, file)); err != nil {
					t.Errorf("%s: link %q: no such file", f, l)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(file, ".md") {
				a, ok := anchors[file]
				if !ok {
					a, _ = scan(t, file)
					anchors[file] = a
				}
				if !a[frag] {
					t.Errorf("%s: link %q: %s has no heading with that anchor", f, l, file)
				}
			}
			checked++
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked: is the scan finding the documents?", checked)
	}
}

// TestCodeNamesDocs checks that every docs/….md a Go file of the
// repository names exists.
func TestCodeNamesDocs(t *testing.T) {
	named := 0
	err := fs.WalkDir(os.DirFS(root), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != "." {
			return fs.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return err
		}
		for _, doc := range codeDoc.FindAllString(string(b), -1) {
			named++
			if _, err := os.Stat(filepath.Join(root, doc)); err != nil {
				t.Errorf("%s names %s, which does not exist", p, doc)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if named < 10 {
		t.Errorf("only %d documents named in the code: is the walk finding the Go files?", named)
	}
}

// TestLayoutMatchesTree: the README's layout block names every package
// directory of the repository, and every directory it names exists.
func TestLayoutMatchesTree(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i := strings.Index(s, "## Layout")
	if i < 0 {
		t.Fatal("README.md has no Layout section")
	}
	block := s[i:]
	if a := strings.Index(block, "```\n"); a >= 0 {
		block = block[a+4:]
		if b := strings.Index(block, "```"); b >= 0 {
			block = block[:b]
		}
	}
	named := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		for _, f := range strings.Fields(line) {
			f = strings.TrimSuffix(strings.TrimSuffix(f, ","), "/")
			if strings.Contains(f, "/") || f == "verbs" || f == "docs" {
				named[f] = true
			} else {
				break // the description begins
			}
		}
	}
	for d := range named {
		if strings.Contains(d, "*") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("README.md's layout names %s/, which is not a directory", d)
		}
	}
	err = fs.WalkDir(os.DirFS(root), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return fs.SkipDir
		}
		if strings.HasPrefix(p, "tools/perf/") || strings.HasPrefix(p, "cmd/ib_") {
			return nil // named by their parent or a pattern
		}
		gos, _ := filepath.Glob(filepath.Join(root, p, "*.go"))
		if len(gos) > 0 && p != "." && !named[p] {
			t.Errorf("README.md's layout does not name %s/", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
