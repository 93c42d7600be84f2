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
	"strings"
	"sync"

	"github.com/gin-gonic/gin"
)

// decodeJSON reads the body strictly into v: application/json only, at most
// maxBody bytes, no unknown fields (names match exactly, case included), no
// field twice, no trailing data.
func decodeJSON(c *gin.Context, maxBody int64, v any) error {
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/json" {
		return errMediaType
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
			return fmt.Errorf("%w: unknown field %q (names are case-sensitive)", errMalformed, b)
		case seen[i]:
			return fmt.Errorf("%w: field %q appears twice", errMalformed, b)
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
	case errors.As(err, &ute):
		return fmt.Errorf("%w: field %q must be %s", errMalformed, ute.Field, kindName(ute.Type))
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: not valid JSON", errMalformed)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%w: unknown field %s", errMalformed, name)
	}
	// The connection failed while the body was read: nothing for the client
	// to fix, and it is likely gone.
	return fmt.Errorf("%w: the request body could not be read", errMalformed)
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
