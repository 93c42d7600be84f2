package handler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/service"
)

// decodeJSON reads the body strictly into v: application/json only, at most
// maxBody bytes, no unknown fields (names match exactly, case included), no
// field twice, no trailing data.
func decodeJSON(c *gin.Context, maxBody int64, v any) error {
	if ct := c.GetHeader("Content-Type"); ct != "application/json" { // the usual one, without parsing
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return errMediaType
		}
	}
	if c.Request.ContentLength > maxBody {
		return fmt.Errorf("%w: limit %d bytes", errTooLarge, maxBody)
	}
	return decodeStrict(http.MaxBytesReader(c.Writer, c.Request.Body, maxBody), maxBody, v)
}

func decodeStrict(r io.Reader, maxBody int64, v any) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return bodyErr(err, maxBody)
	}
	if o, ok := v.(*orderRequest); ok && plainOrder(body, o) {
		return nil
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] != '{' {
		return fmt.Errorf("%w: the body must be a JSON object", errMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyErr(err, maxBody)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return bodyErr(err, maxBody)
		}
		return fmt.Errorf("%w: trailing data after the JSON object", errMalformed)
	}
	return exactNames(body, v)
}

// plainOrder reads the common order body, {"sku": "...", "quantity": n} in
// either order, with both members once, a SKU of key characters only (no
// escapes) and a plain non-negative integer, into o in one pass, and
// reports whether it did. Every body it takes, the general path decodes to
// the same o (FuzzDecodeOrder checks); it leaves every other one to it.
func plainOrder(body []byte, o *orderRequest) bool {
	p := orderScan{b: body}
	var sku *string
	var q *int64
	p.space()
	if !p.byte('{') {
		return false
	}
	for n := range 2 {
		if n == 1 && !p.byte(',') {
			return false
		}
		name, ok := p.keyString()
		if !ok || !p.byte(':') {
			return false
		}
		switch {
		case name == "sku" && sku == nil:
			s, ok := p.keyString()
			if !ok {
				return false
			}
			sku = &s
		case name == "quantity" && q == nil:
			v, ok := p.integer()
			if !ok {
				return false
			}
			q = &v
		default:
			return false
		}
	}
	if !p.byte('}') || p.i != len(body) {
		return false
	}
	o.SKU, o.Quantity = sku, q
	return true
}

// orderScan is plainOrder's cursor over the body; each step skips the JSON
// white space after what it reads.
type orderScan struct {
	b []byte
	i int
}

func (p *orderScan) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// byte reads c.
func (p *orderScan) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		p.space()
		return true
	}
	return false
}

// keyString reads a JSON string of [A-Za-z0-9._:-] only (so no escapes).
func (p *orderScan) keyString() (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	end := start
	for end < len(p.b) && keyByte(p.b[end]) {
		end++
	}
	if end == len(p.b) || p.b[end] != '"' {
		return "", false
	}
	p.i = end + 1
	p.space()
	return string(p.b[start:end]), true
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
}

// integer reads 0 or [1-9][0-9]{0,17}: an int64 with no sign, fraction or
// exponent.
func (p *orderScan) integer() (int64, bool) {
	start := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	digits := p.b[start:p.i]
	if len(digits) == 0 || len(digits) > 18 || len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	var n int64
	for _, d := range digits {
		n = n*10 + int64(d-'0')
	}
	p.space()
	return n, true
}

// exactNames checks the object's member names against v's json names:
// encoding/json matches them case-insensitively and keeps the last of a
// repeated member, so {"SKU":..} or {"quantity":1,"quantity":9} would
// otherwise be taken. body has been decoded once already, so it is valid.
func exactNames(body []byte, v any) error {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	known := jsonNames(t)
	seen := make([]bool, len(known))
	check := func(b []byte) error {
		i := slices.IndexFunc(known, func(k string) bool { return k == string(b) })
		switch {
		case i < 0:
			return fmt.Errorf("%w: unknown field %s (names are case-sensitive)", errMalformed, echoName(string(b)))
		case seen[i]:
			return fmt.Errorf("%w: field %s appears twice", errMalformed, echoName(string(b)))
		}
		seen[i] = true
		return nil
	}
	if ok, err := scanNames(body, check); ok {
		return err
	}
	clear(seen) // a name with an escape: let encoding/json read the names
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // {
		return bodyErr(err, 0)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bodyErr(err, 0)
		}
		name, _ := tok.(string)
		if err := check([]byte(name)); err != nil {
			return err
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return bodyErr(err, 0)
		}
	}
	return nil
}

// namesOf caches jsonNames by type.
var namesOf sync.Map // reflect.Type -> []string

// jsonNames is the json names of struct type t's fields.
func jsonNames(t reflect.Type) []string {
	if n, ok := namesOf.Load(t); ok {
		return n.([]string)
	}
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	namesOf.Store(t, names)
	return names
}

// scanNames calls f with each member name of the top-level object in body,
// which must be valid JSON, in one pass over the bytes. It returns ok false,
// having stopped, at a name with an escape in it, which only a JSON decoder
// can read (or at a string left open: not valid JSON); otherwise f's first
// error.
func scanNames(body []byte, f func(name []byte) error) (ok bool, err error) {
	depth, name := 0, false // name: the next string at depth 1 is a member name
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{':
			depth++
			name = depth == 1
		case '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			name = depth == 1
		case '"':
			j := i + 1
			for ; j < len(body) && body[j] != '"'; j++ {
				if body[j] == '\\' {
					if name {
						return false, nil
					}
					j++ // the escaped byte, which may be a quote
				}
			}
			if j >= len(body) {
				return false, nil
			}
			if name {
				if err := f(body[i+1 : j]); err != nil {
					return true, err
				}
				name = false
			}
			i = j
		}
	}
	return true, nil
}

// bodyErr words a read or decode error for the client: never a socket
// address, a Go type name or a package prefix.
func bodyErr(err error, maxBody int64) error {
	var mbe *http.MaxBytesError
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: limit %d bytes", errTooLarge, maxBody)
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: %w", errBodyTimeout, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: empty body", errMalformed)
	case errors.Is(err, service.ErrInvalid): // a field's own decoder (setInstant, setUnpaid) says what to fix
		return err
	case errors.As(err, &ute):
		return fmt.Errorf("%w: field %q must be %s", errMalformed, ute.Field, kindName(ute.Type))
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: not valid JSON", errMalformed)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, err := strconv.Unquote(name); err == nil {
			name = echoName(n)
		}
		return fmt.Errorf("%w: unknown field %s", errMalformed, name)
	}
	// The connection failed while the body was read: nothing for the client
	// to fix, and it is likely gone.
	return fmt.Errorf("%w: the request body could not be read", errMalformed)
}

// maxEchoName is the most of a member name a problem's detail repeats.
const maxEchoName = 128

// echoName quotes a member name the client sent for a problem's detail:
// its first maxEchoName bytes (whole characters), marked with an ellipsis
// where it was cut.
func echoName(name string) string {
	if c := cut(name, maxEchoName); len(c) < len(name) {
		return strconv.Quote(c) + "…"
	}
	return strconv.Quote(name)
}

// kindName names a JSON type for a client.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	}
	return "of another type"
}

func jsonEncoder(w io.Writer) *json.Encoder { return json.NewEncoder(w) }

// writeJSON writes v as the JSON body with status, ending in a newline like
// every problem body.
func writeJSON(c *gin.Context, status int, v any) {
	c.Header("Content-Type", "application/json; charset=utf-8")
	c.Status(status)
	if err := jsonEncoder(c.Writer).Encode(v); err != nil {
		_ = c.Error(err)
	}
}
