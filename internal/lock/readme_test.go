package lock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// exampleBody returns the body of the function name in example_test.go,
// one tab of indentation removed: the code block of the README.
func exampleBody(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
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
	t.Fatalf("example_test.go has no func %s", name)
	return ""
}

// The README's lock snippet is Example, which go test runs: it cannot rot.
func TestREADMEExampleIsExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "```go\n" + exampleBody(t, "Example") + "\n```"
	if !strings.Contains(string(readme), want) {
		t.Fatalf("README.md's lock example is not the body of Example in internal/lock/example_test.go; paste this:\n%s", want)
	}
}
