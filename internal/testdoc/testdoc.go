// Package testdoc keeps code shown in the docs equal to code the tests run:
// a README's Go block must be the body of a runnable Example.
package testdoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// ExampleBody returns the body of the function name in the Go file file,
// one tab of indentation removed, as a README shows it.
func ExampleBody(t testing.TB, file, name string) string {
	t.Helper()
	src, err := os.ReadFile(file) //nolint:gosec // G304: a file of the repository, named by its test
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
			var lines []string
			for _, l := range strings.Split(strings.Trim(body, "\n"), "\n") {
				lines = append(lines, strings.TrimPrefix(l, "\t"))
			}
			return strings.Join(lines, "\n")
		}
	}
	t.Fatalf("%s has no func %s", file, name)
	return ""
}

// ShowsExample fails t unless the markdown file readme holds the body of
// the function name of file as a Go code block.
func ShowsExample(t testing.TB, readme, file, name string) {
	t.Helper()
	doc, err := os.ReadFile(readme) //nolint:gosec // G304: a file of the repository, named by its test
	if err != nil {
		t.Fatal(err)
	}
	want := "```go\n" + ExampleBody(t, file, name) + "\n```"
	if !strings.Contains(string(doc), want) {
		t.Fatalf("%s does not show %s of %s; paste this:\n%s", readme, name, file, want)
	}
}

// Generated fails t unless the part of the file doc between the lines
// begin and end (each with its newline) is want; with update set it
// rewrites that part instead (when t has not failed). rerun is the command
// the failure tells the reader to run.
func Generated(t testing.TB, doc, begin, end, want string, update bool, rerun string) {
	t.Helper()
	b, err := os.ReadFile(doc) //nolint:gosec // G304: a file of the repository, named by its test
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated part between %q and %q", doc, begin, end)
	}
	if text[i+len(begin):j] == want {
		return
	}
	if update && !t.Failed() {
		if err := os.WriteFile(doc, []byte(text[:i+len(begin)]+want+text[j:]), 0o644); err != nil { //nolint:gosec // G306, G304: a document of the repository, named by its test
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is stale; run %s. Want:\n%s", doc, rerun, want)
}
