package composecheck

import (
	"fmt"
	"strings"
)

// Directive is one nginx directive: its name, arguments and, for a block
// such as upstream or server, the directives inside it.
type Directive struct {
	Name  string
	Args  []string
	Block []Directive
}

// ParseNginx parses the text of an nginx configuration file into its
// directives. It knows comments, quoting with ' or ", blocks and ';', which is
// all nginx.conf syntax has; it does not know which directives exist. It
// returns an error for an unbalanced block or a directive with no ';'.
func ParseNginx(text string) ([]Directive, error) {
	toks, err := tokenize(text)
	if err != nil {
		return nil, err
	}
	ds, rest, err := parseBlock(toks, false)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("nginx: unexpected %q at top level", rest[0].text)
	}
	return ds, nil
}

// Find returns, depth first, every directive named name in ds and their blocks.
func Find(ds []Directive, name string) []Directive {
	var out []Directive
	for _, d := range ds {
		if d.Name == name {
			out = append(out, d)
		}
		out = append(out, Find(d.Block, name)...)
	}
	return out
}

type token struct {
	text   string
	quoted bool // a quoted word is never '{', '}' or ';'
}

func tokenize(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch c {
		case '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case ' ', '\t', '\n', '\r':
			i++
		case '{', '}', ';':
			toks = append(toks, token{text: string(c)})
			i++
		case '"', '\'':
			j := i + 1
			var b strings.Builder
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("nginx: unterminated %c quote", c)
			}
			toks = append(toks, token{text: b.String(), quoted: true})
			i = j + 1
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\r\n{};#", rune(s[j])) {
				j++
			}
			toks = append(toks, token{text: s[i:j]})
			i = j
		}
	}
	return toks, nil
}

func parseBlock(toks []token, nested bool) ([]Directive, []token, error) {
	var ds []Directive
	for len(toks) > 0 {
		if t := toks[0]; !t.quoted && t.text == "}" {
			if !nested {
				return nil, nil, fmt.Errorf("nginx: unbalanced '}'")
			}
			return ds, toks[1:], nil
		}
		d := Directive{Name: toks[0].text}
		toks = toks[1:]
		for {
			if len(toks) == 0 {
				return nil, nil, fmt.Errorf("nginx: directive %q has no ';' or block", d.Name)
			}
			t := toks[0]
			toks = toks[1:]
			if !t.quoted && t.text == ";" {
				break
			}
			if !t.quoted && t.text == "{" {
				var err error
				d.Block, toks, err = parseBlock(toks, true)
				if err != nil {
					return nil, nil, err
				}
				break
			}
			if !t.quoted && t.text == "}" {
				return nil, nil, fmt.Errorf("nginx: directive %q has no ';' before '}'", d.Name)
			}
			d.Args = append(d.Args, t.text)
		}
		ds = append(ds, d)
	}
	if nested {
		return nil, nil, fmt.Errorf("nginx: block not closed")
	}
	return ds, nil, nil
}
