package app_test

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/config.md's generated table")

const (
	configDoc = "../../docs/config.md"
	docBegin  = "<!-- generated from app.Config by TestConfigDoc: do not edit -->\n"
	docEnd    = "<!-- end of the generated table -->\n"
)

// docs/config.md's table is app.Config's: a row per field with an env tag,
// its default and the field's doc comment. -update rewrites it.
func TestConfigDoc(t *testing.T) {
	want := configTable(t)
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated table between %q and %q", configDoc, docBegin, docEnd)
	}
	got := doc[i+len(docBegin) : j]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(configDoc, []byte(doc[:i+len(docBegin)]+want+doc[j:]), 0o644); err != nil { //nolint:gosec // G306: a document of the repository
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's table differs from app.Config; run go test ./internal/app -run TestConfigDoc -update. Want:\n%s", configDoc, want)
}

// configTable renders the table from internal/app/config.go's Config.
func configTable(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| variable | default | |\n|---|---|---|\n")
	rows := 0
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tagText, _ := strconv.Unquote(field.Tag.Value)
			tag := reflect.StructTag(tagText)
			name := tag.Get("env")
			if name == "" {
				continue
			}
			if field.Doc == nil {
				t.Errorf("Config.%s (%s) has no doc comment: it is the variable's line in %s", field.Names[0].Name, name, configDoc)
				continue
			}
			def := "empty"
			if d, ok := tag.Lookup("envDefault"); ok {
				def = "`" + d + "`"
			}
			text := strings.Join(strings.Fields(field.Doc.Text()), " ")
			b.WriteString("| `" + name + "` | " + def + " | " + text + " |\n")
			rows++
		}
		return false
	})
	if rows == 0 {
		t.Fatal("no env-tagged field found in Config")
	}
	return b.String()
}
