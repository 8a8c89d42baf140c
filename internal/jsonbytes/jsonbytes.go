// Package jsonbytes carries strings that are not valid UTF-8 through encoding/json, which replaces
// their invalid bytes with U+FFFD. Names (store keys, paths) are bytes: a name changed on the way is
// another file's name, and a `ckguard pin` of it protects nothing, a listing of it shows a file that
// does not exist.
//
// Two forms:
//   - Escape/Unescape, between ckguard processes (the control socket): a string that is not valid
//     UTF-8, or that starts with the marker, travels as the marker followed by its bytes in base64, so
//     every string arrives with its exact bytes and no other string is taken for an escaped one.
//   - Printable, for people and jq (`--json`): an escaped string is shown as its text with U+FFFD for
//     the invalid bytes, and its exact bytes go beside it, base64: the member "NAME" gets "NAME_bytes";
//     an array of strings "NAME" gets "NAME_bytes", an array as long with null where the element is
//     valid UTF-8 (the audit log's `path_bytes` is the same form).
package jsonbytes

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// marker starts an escaped string. NUL is in no file name or path, so a real string starting with it
// is rare; one that does is escaped too.
const marker = "\x00b64:"

// markerJSON is the marker as encoding/json writes it.
const markerJSON = `\u0000b64:`

var b64 = base64.StdEncoding

func escapeString(s string) (string, bool) {
	if utf8.ValidString(s) && !strings.HasPrefix(s, marker) {
		return s, false
	}
	return marker + b64.EncodeToString([]byte(s)), true
}

// unescapeString returns the bytes an escaped string stands for (ok false: s is not escaped).
func unescapeString(s string) (string, bool, error) {
	if !strings.HasPrefix(s, marker) {
		return s, false, nil
	}
	b, err := b64.DecodeString(s[len(marker):])
	if err != nil {
		return "", true, fmt.Errorf("escaped string %q: %w", s, err)
	}
	return string(b), true, nil
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	unmarshalerType   = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler   = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// ownEncoding reports a type that encodes itself (its strings are its own business: time.Time,
// durations).
func ownEncoding(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(marshalerType) || t.Implements(textMarshalerType) || p.Implements(marshalerType) || p.Implements(textMarshalerType) ||
		t.Implements(unmarshalerType) || t.Implements(textUnmarshaler) || p.Implements(unmarshalerType) || p.Implements(textUnmarshaler)
}

// Escape returns v with every string that needs it escaped (see the package doc). v itself is never
// changed: what changes is copied (v is returned as is when nothing needs escaping).
func Escape(v any) any {
	if v == nil {
		return nil
	}
	nv, changed := escapeValue(reflect.ValueOf(v))
	if !changed {
		return v
	}
	return nv.Interface()
}

// escapeValue returns v, or a copy with its strings escaped (changed).
func escapeValue(v reflect.Value) (reflect.Value, bool) {
	t := v.Type()
	if v.Kind() != reflect.Pointer && v.Kind() != reflect.Interface && ownEncoding(t) {
		return v, false
	}
	switch v.Kind() {
	case reflect.String:
		if s, ok := escapeString(v.String()); ok {
			n := reflect.New(t).Elem()
			n.SetString(s)
			return n, true
		}
	case reflect.Pointer:
		if v.IsNil() || ownEncoding(t.Elem()) {
			return v, false
		}
		if nv, ok := escapeValue(v.Elem()); ok {
			p := reflect.New(t.Elem())
			p.Elem().Set(nv)
			return p, true
		}
	case reflect.Interface:
		if v.IsNil() {
			return v, false
		}
		if nv, ok := escapeValue(v.Elem()); ok {
			n := reflect.New(t).Elem()
			n.Set(nv)
			return n, true
		}
	case reflect.Struct:
		var c reflect.Value
		for i := range t.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			if nv, ok := escapeValue(v.Field(i)); ok {
				if !c.IsValid() {
					c = reflect.New(t).Elem()
					c.Set(v)
				}
				c.Field(i).Set(nv)
			}
		}
		if c.IsValid() {
			return c, true
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && (v.IsNil() || t.Elem().Kind() == reflect.Uint8) {
			return v, false // []byte is base64 in JSON: exact already
		}
		var c reflect.Value
		for i := range v.Len() {
			if nv, ok := escapeValue(v.Index(i)); ok {
				if !c.IsValid() {
					if v.Kind() == reflect.Slice {
						c = reflect.MakeSlice(t, v.Len(), v.Len())
						reflect.Copy(c, v)
					} else {
						c = reflect.New(t).Elem()
						c.Set(v)
					}
				}
				c.Index(i).Set(nv)
			}
		}
		if c.IsValid() {
			return c, true
		}
	case reflect.Map:
		if v.IsNil() {
			return v, false
		}
		changed := false
		type kv struct{ k, v reflect.Value }
		var all []kv
		for it := v.MapRange(); it.Next(); {
			k, kc := it.Key(), false
			if k.Kind() == reflect.String && !ownEncoding(k.Type()) {
				k, kc = escapeValue(k)
			}
			e, ec := escapeValue(it.Value())
			changed = changed || kc || ec
			all = append(all, kv{k, e})
		}
		if changed {
			c := reflect.MakeMapWithSize(t, len(all))
			for _, p := range all {
				c.SetMapIndex(p.k, p.v)
			}
			return c, true
		}
	}
	return v, false
}

// Unescape reverses Escape in the value p points to (decoded from JSON written from an Escape'd
// value). A malformed escaped string is an error.
func Unescape(p any) error {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return errors.New("jsonbytes: Unescape needs a non-nil pointer")
	}
	return unescapeValue(v.Elem())
}

// unescapeValue unescapes the strings of v (addressable) in place.
func unescapeValue(v reflect.Value) error {
	t := v.Type()
	if v.Kind() != reflect.Pointer && v.Kind() != reflect.Interface && ownEncoding(t) {
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		s, ok, err := unescapeString(v.String())
		if err != nil {
			return err
		}
		if ok {
			v.SetString(s)
		}
	case reflect.Pointer:
		if !v.IsNil() && !ownEncoding(t.Elem()) {
			return unescapeValue(v.Elem())
		}
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		c := reflect.New(v.Elem().Type()).Elem()
		c.Set(v.Elem())
		if err := unescapeValue(c); err != nil {
			return err
		}
		v.Set(c)
	case reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				if err := unescapeValue(v.Field(i)); err != nil {
					return err
				}
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return nil
		}
		for i := range v.Len() {
			if err := unescapeValue(v.Index(i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		c := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.New(t.Key()).Elem()
			k.Set(it.Key())
			if k.Kind() == reflect.String && !ownEncoding(k.Type()) {
				if err := unescapeValue(k); err != nil {
					return err
				}
			}
			e := reflect.New(t.Elem()).Elem()
			e.Set(it.Value())
			if err := unescapeValue(e); err != nil {
				return err
			}
			c.SetMapIndex(k, e)
		}
		v.Set(c)
	}
	return nil
}

// Escaped reports whether the JSON doc holds an escaped string.
func Escaped(doc []byte) bool { return bytes.Contains(doc, []byte(markerJSON)) }

// Printable rewrites doc (JSON written from an Escape'd value) into the form for people and jq (see
// the package doc). A doc without escaped strings is returned as is.
func Printable(doc []byte) ([]byte, error) {
	if !Escaped(doc) {
		return doc, nil
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	n, err := parse(d)
	if err != nil {
		return nil, fmt.Errorf("jsonbytes: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("jsonbytes: more than one JSON value")
	}
	var out bytes.Buffer
	if err := n.write(&out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// node is a parsed JSON value, objects with their members in order.
type node struct {
	kind    byte // '{', '[', 's' (string), 'v' (any other scalar)
	members []member
	elems   []node
	str     string // 's': the string (escaped strings decoded)
	escaped bool   // 's': it was escaped
	scalar  any    // 'v'
}

type member struct {
	name string
	v    node
}

func parse(d *json.Decoder) (node, error) {
	tok, err := d.Token()
	if err != nil {
		return node{}, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			n := node{kind: '{'}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return node{}, err
				}
				name, ok := k.(string)
				if !ok {
					return node{}, fmt.Errorf("object key %v", k)
				}
				v, err := parse(d)
				if err != nil {
					return node{}, err
				}
				n.members = append(n.members, member{name, v})
			}
			_, err := d.Token()
			return n, err
		case '[':
			n := node{kind: '['}
			for d.More() {
				v, err := parse(d)
				if err != nil {
					return node{}, err
				}
				n.elems = append(n.elems, v)
			}
			_, err := d.Token()
			return n, err
		}
		return node{}, fmt.Errorf("unexpected %v", tok)
	case string:
		s, esc, err := unescapeString(tok)
		return node{kind: 's', str: s, escaped: esc}, err
	default:
		return node{kind: 'v', scalar: tok}, nil
	}
}

func (n node) hasEscaped() bool {
	for _, e := range n.elems {
		if e.kind == 's' && e.escaped {
			return true
		}
	}
	return false
}

func (n node) write(w *bytes.Buffer) error {
	put := func(v any) error {
		b, err := json.Marshal(v)
		w.Write(b)
		return err
	}
	switch n.kind {
	case 's':
		return put(n.str) // encoding/json shows each invalid byte as U+FFFD
	case 'v':
		return put(n.scalar)
	case '[':
		w.WriteByte('[')
		for i, e := range n.elems {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := e.write(w); err != nil {
				return err
			}
		}
		w.WriteByte(']')
		return nil
	}
	have := map[string]bool{}
	for _, m := range n.members {
		have[m.name] = true
	}
	w.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			w.WriteByte(',')
		}
		first = false
	}
	for _, m := range n.members {
		sep()
		if err := put(m.name); err != nil {
			return err
		}
		w.WriteByte(':')
		if err := m.v.write(w); err != nil {
			return err
		}
		side := m.name + "_bytes"
		if have[side] {
			continue // the value carries its bytes itself (a quarantine entry's path_bytes)
		}
		switch {
		case m.v.kind == 's' && m.v.escaped:
			sep()
			_ = put(side)
			w.WriteByte(':')
			if err := put(b64.EncodeToString([]byte(m.v.str))); err != nil {
				return err
			}
		case m.v.kind == '[' && m.v.hasEscaped():
			bs := make([]*string, len(m.v.elems))
			for i, e := range m.v.elems {
				if e.kind == 's' && e.escaped {
					s := b64.EncodeToString([]byte(e.str))
					bs[i] = &s
				}
			}
			sep()
			_ = put(side)
			w.WriteByte(':')
			if err := put(bs); err != nil {
				return err
			}
		}
	}
	w.WriteByte('}')
	return nil
}
