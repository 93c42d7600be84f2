package app

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/seckill/stock/internal/testdoc"
)

var update = flag.Bool("update", false, "rewrite docs/config.md's generated tables")

const (
	configDoc = "../../docs/config.md"
	docBegin  = "<!-- generated from app.Config by TestConfigDoc: do not edit -->\n"
	docEnd    = "<!-- end of the generated table -->\n"
	module    = "github.com/seckill/stock/"
)

// docs/config.md's tables are app.Config's: one per group, a row per
// variable with its default, the values ParseEnv accepts when it is
// enumerated, and its field's doc comment. -update rewrites them.
func TestConfigDoc(t *testing.T) {
	testdoc.Generated(t, configDoc, docBegin, docEnd, configTables(t), *update, "go test ./internal/app -run TestConfigDoc -update")
}

// Every enumerated variable is a field of Config, and a parse error can
// name its variable: no two fields of a type env can fail to parse share a
// name and a type (parseFailure finds the variable by them).
func TestConfigSettings(t *testing.T) {
	seen := map[string]string{}
	names := map[string]bool{}
	for _, s := range settings(&Config{}) {
		names[s.name] = true
		if s.field.Type.Kind() == reflect.String || s.field.Type.Kind() == reflect.Slice {
			continue
		}
		key := s.field.Name + " " + s.field.Type.String()
		if other, ok := seen[key]; ok {
			t.Errorf("%s and %s are both fields %s: a parse error could name the wrong one", other, s.name, key)
		}
		seen[key] = s.name
	}
	for name := range enums {
		if !names[name] {
			t.Errorf("enums lists %s, which no field of Config reads", name)
		}
	}
}

// configTables renders the tables: a section per group of Config, in field
// order, the comment above the group's field its introduction.
func configTables(t *testing.T) string {
	t.Helper()
	docs := fieldDocs{}
	var b strings.Builder
	var group func(title, intro string, typ reflect.Type, depth int)
	group = func(title, intro string, typ reflect.Type, depth int) {
		var rows strings.Builder
		var subs []func()
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := f.Tag.Get("env")
			text := docs.of(t, typ, f.Name)
			switch {
			case name != "":
				rows.WriteString(row(t, f, name, text))
			case f.Type.Kind() == reflect.Struct:
				subs = append(subs, func() { group(strings.TrimPrefix(title+"."+f.Name, "."), text, f.Type, depth+1) })
			}
		}
		if depth > 0 {
			b.WriteString("\n" + strings.Repeat("#", min(depth+1, 3)) + " " + title + "\n\n")
			if intro != "" {
				b.WriteString(intro + "\n\n")
			}
		}
		if rows.Len() > 0 {
			b.WriteString("| variable | default | |\n|---|---|---|\n" + rows.String())
		}
		for _, sub := range subs {
			sub()
		}
	}
	group("", "", reflect.TypeFor[Config](), 0)
	return strings.TrimPrefix(b.String(), "\n")
}

// row is a variable's line of its group's table.
func row(t *testing.T, f reflect.StructField, name, text string) string {
	t.Helper()
	if text == "" {
		t.Errorf("the field of %s has no doc comment: it is the variable's line in %s", name, configDoc)
	}
	def := "empty"
	if d, ok := f.Tag.Lookup("envDefault"); ok {
		def = "`" + d + "`"
	}
	if e, ok := enums[name]; ok {
		text += " One of `" + strings.Join(e.values(), "`, `") + "`."
	}
	return "| `" + name + "` | " + def + " | " + strings.TrimSpace(text) + " |\n"
}

// fieldDocs are the doc comments of struct fields, by type and field name,
// read from the source of the type's package in this module.
type fieldDocs map[reflect.Type]map[string]string

func (d fieldDocs) of(t *testing.T, typ reflect.Type, field string) string {
	t.Helper()
	if d[typ] == nil {
		d[typ] = structDocs(t, typ)
	}
	return d[typ][field]
}

// structDocs reads the doc comments of typ's fields from its package's
// files.
func structDocs(t *testing.T, typ reflect.Type) map[string]string {
	t.Helper()
	dir := filepath.Join("..", "..", strings.TrimPrefix(typ.PkgPath(), module))
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != typ.Name() {
				return true
			}
			for _, field := range ts.Type.(*ast.StructType).Fields.List {
				for _, id := range field.Names {
					out[id.Name] = strings.Join(strings.Fields(field.Doc.Text()), " ")
				}
			}
			return false
		})
	}
	if len(out) == 0 {
		t.Fatalf("no struct %s found in %s", typ.Name(), dir)
	}
	return out
}
