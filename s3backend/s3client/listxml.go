package s3client

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	smithytime "github.com/aws/smithy-go/time"
)

// The lean ListObjectsV2 decoder: the response body straight into listed objects, without the SDK's
// reflection-free but token-by-token encoding/xml decoding (most of the client's CPU in a walk).
//
// Every key decides what a deletion may remove, so the decoder accepts only what it fully understands
// and errors on anything else, never returning a shorter page: it accepts no more than the SDK's decoder
// does (FuzzListDecode checks that), and refuses some responses the SDK would turn into silent gaps or
// wrong keys — no ListBucketResult root, a Contents without Key, Size or LastModified, a missing
// IsTruncated, a KeyCount that is not the number of entries, an EncodingType other than url (what ckguard asks for),
// a field given twice, a raw carriage return (XML would turn it into a line feed), a DOCTYPE, anything
// after the root element. Memory is bounded by listBodyMax, listEntriesMax and listValueMax.

const (
	// listBodyMax bounds a response body: a page of 1,000 keys of 1,024 bytes, each character written
	// as a 6-byte entity, with every optional field, is under 10 MiB.
	listBodyMax = 32 << 20
	// listEntriesMax bounds the objects plus prefixes of a page (S3 returns at most 1,000).
	listEntriesMax = 10_000
	// listValueMax bounds one decoded value (a key is at most 1,024 bytes on AWS).
	listValueMax = 64 << 10
	// listDepthMax bounds element nesting (the schema has four levels).
	listDepthMax = 64
)

// listResult is one decoded ListObjectsV2 page, keys as the server sent them (with the location prefix).
type listResult struct {
	Objects   []Object // Key, Size, ModTime, ETag (unquoted)
	Prefixes  []string // with the trailing delimiter
	Truncated bool
	Next      string // NextContinuationToken
	// URLEncoded: the server URL-encoded the keys and prefixes (<EncodingType>url</EncodingType>, as
	// asked); page decodes them.
	URLEncoded bool
}

type tokKind uint8

const (
	tokEOF   tokKind = iota
	tokStart         // a start tag (a self-closing one is followed by its tokEnd)
	tokEnd
	tokText  // character data, entities decoded; also a CDATA section
	tokOther // a comment or processing instruction
)

// xmlScanner tokenizes a UTF-8 XML document held in memory. Names and text point into b or into the
// reused scratch buffer and stay valid only until the next call of next.
type xmlScanner struct {
	b       []byte
	i       int
	stack   [][]byte // raw names of the open elements
	closing bool     // the last start tag was self-closing: its end comes next
	rootEnd bool     // the root element has been closed
	name    []byte   // local name of the last start or end tag
	text    []byte   // data of the last tokText
	scratch []byte
}

var errXML = errors.New("malformed XML")

func (s *xmlScanner) errf(format string, a ...any) error {
	return fmt.Errorf("%w at byte %d: %s", errXML, s.i, fmt.Sprintf(format, a...))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

func isNameByte(c byte, first bool) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_', c == ':':
		return true
	case '0' <= c && c <= '9', c == '-', c == '.':
		return !first
	}
	return false
}

// localName is the part of a raw name that encoding/xml calls Local: after the prefix of "p:name".
func localName(raw []byte) []byte {
	if i := bytes.IndexByte(raw, ':'); i > 0 && i < len(raw)-1 {
		return raw[i+1:]
	}
	return raw
}

// readName reads an ASCII XML name at s.i (at most one ':').
func (s *xmlScanner) readName() ([]byte, error) {
	start := s.i
	for s.i < len(s.b) && isNameByte(s.b[s.i], s.i == start) {
		s.i++
	}
	n := s.b[start:s.i]
	if len(n) == 0 {
		return nil, s.errf("expected a name")
	}
	if bytes.Count(n, []byte{':'}) > 1 {
		return nil, s.errf("name %q has more than one ':'", n)
	}
	return n, nil
}

func (s *xmlScanner) skipSpace() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

// next returns the next token.
func (s *xmlScanner) next() (tokKind, error) {
	if s.closing {
		s.closing = false
		return tokEnd, s.pop()
	}
	if s.i >= len(s.b) {
		if len(s.stack) > 0 {
			return 0, s.errf("unexpected end of document inside <%s>", s.stack[len(s.stack)-1])
		}
		return tokEOF, nil
	}
	if s.b[s.i] != '<' {
		return s.charData()
	}
	rest := s.b[s.i:]
	switch {
	case bytes.HasPrefix(rest, []byte("</")):
		return s.endTag()
	case bytes.HasPrefix(rest, []byte("<!--")):
		return s.comment()
	case bytes.HasPrefix(rest, []byte("<![CDATA[")):
		return s.cdata()
	case bytes.HasPrefix(rest, []byte("<!")):
		return 0, s.errf("DOCTYPE or other declaration not accepted")
	case bytes.HasPrefix(rest, []byte("<?")):
		return tokOther, s.procInst()
	}
	return s.startTag()
}

// charData scans the text from s.i up to the next '<' (or the end): only white space is accepted
// outside the root element.
func (s *xmlScanner) charData() (tokKind, error) {
	end := bytes.IndexByte(s.b[s.i:], '<')
	if end < 0 {
		end = len(s.b) - s.i
	}
	raw := s.b[s.i : s.i+end]
	if bytes.Contains(raw, []byte("]]>")) {
		return 0, s.errf("']]>' outside a CDATA section")
	}
	t, err := s.decodeText(raw, false)
	if err != nil {
		return 0, err
	}
	if len(s.stack) == 0 && len(bytes.TrimLeft(t, " \t\n")) > 0 {
		return 0, s.errf("text outside the root element")
	}
	s.i += end
	s.text = t
	return tokText, nil
}

// endTag scans "</name>" at s.i; it must close the innermost open element.
func (s *xmlScanner) endTag() (tokKind, error) {
	s.i += 2
	n, err := s.readName()
	if err != nil {
		return 0, err
	}
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '>' {
		return 0, s.errf("end tag </%s> not closed by '>'", n)
	}
	s.i++
	if len(s.stack) == 0 || !bytes.Equal(s.stack[len(s.stack)-1], n) {
		return 0, s.errf("unexpected end tag </%s>", n)
	}
	return tokEnd, s.pop()
}

// comment skips "<!-- … -->" at s.i; "--" inside one is malformed, as XML says.
func (s *xmlScanner) comment() (tokKind, error) {
	rest := s.b[s.i:]
	end := bytes.Index(rest[4:], []byte("--"))
	if end < 0 || 4+end+2 >= len(rest) || rest[4+end+2] != '>' {
		return 0, s.errf("unterminated comment or '--' inside one")
	}
	s.i += 4 + end + 3
	return tokOther, nil
}

// cdata scans "<![CDATA[ … ]]>" at s.i, accepted only inside the root element.
func (s *xmlScanner) cdata() (tokKind, error) {
	if len(s.stack) == 0 {
		return 0, s.errf("CDATA outside the root element")
	}
	rest := s.b[s.i:]
	end := bytes.Index(rest[9:], []byte("]]>"))
	if end < 0 {
		return 0, s.errf("unterminated CDATA section")
	}
	t, err := s.decodeText(rest[9:9+end], true)
	if err != nil {
		return 0, err
	}
	s.i += 9 + end + 3
	s.text = t
	return tokText, nil
}

// startTag scans "<name attr…>" or "<name attr…/>" at s.i and opens the element (a self-closing one
// is closed by the next call). One root element, at most listDepthMax open.
func (s *xmlScanner) startTag() (tokKind, error) {
	s.i++
	n, err := s.readName()
	if err != nil {
		return 0, err
	}
	if len(s.stack) == 0 && s.rootEnd {
		return 0, s.errf("second root element <%s>", n)
	}
	if len(s.stack) >= listDepthMax {
		return 0, s.errf("elements nested deeper than %d", listDepthMax)
	}
	if err := s.startTagAttrs(n); err != nil {
		return 0, err
	}
	s.stack = append(s.stack, n)
	s.name = localName(n)
	return tokStart, nil
}

// startTagAttrs scans the attributes of start tag <n> up to and including its '>' or "/>" (then
// s.closing is set); each attribute must follow white space.
func (s *xmlScanner) startTagAttrs(n []byte) error {
	for {
		sp := s.i
		s.skipSpace()
		if s.i >= len(s.b) {
			return s.errf("unterminated start tag <%s>", n)
		}
		switch s.b[s.i] {
		case '>':
			s.i++
			return nil
		case '/':
			if s.i+1 >= len(s.b) || s.b[s.i+1] != '>' {
				return s.errf("'/' inside start tag <%s>", n)
			}
			s.i += 2
			s.closing = true
			return nil
		}
		if sp == s.i {
			return s.errf("no space before an attribute in <%s>", n)
		}
		if err := s.attr(); err != nil {
			return err
		}
	}
}

func (s *xmlScanner) pop() error {
	n := s.stack[len(s.stack)-1]
	s.stack = s.stack[:len(s.stack)-1]
	s.name = localName(n)
	if len(s.stack) == 0 {
		s.rootEnd = true
	}
	return nil
}

// attr reads name="value" (or 'value'), checking the value's characters and entities.
func (s *xmlScanner) attr() error {
	if _, err := s.readName(); err != nil {
		return err
	}
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '=' {
		return s.errf("attribute without '='")
	}
	s.i++
	s.skipSpace()
	if s.i >= len(s.b) || (s.b[s.i] != '"' && s.b[s.i] != '\'') {
		return s.errf("attribute value not quoted")
	}
	q := s.b[s.i]
	s.i++
	end := bytes.IndexByte(s.b[s.i:], q)
	if end < 0 {
		return s.errf("unterminated attribute value")
	}
	v := s.b[s.i : s.i+end]
	if bytes.IndexByte(v, '<') >= 0 {
		return s.errf("'<' in an attribute value")
	}
	if _, err := s.decodeText(v, false); err != nil {
		return err
	}
	s.i += end + 1
	return nil
}

// procInst skips a processing instruction; the XML declaration, only at the very start, must say
// version 1.0 and UTF-8 if it names them.
func (s *xmlScanner) procInst() error {
	start := s.i
	s.i += 2
	target, err := s.readName()
	if err != nil {
		return err
	}
	end := bytes.Index(s.b[s.i:], []byte("?>"))
	if end < 0 {
		return s.errf("unterminated processing instruction")
	}
	body := s.b[s.i : s.i+end]
	s.i += end + 2
	if !strings.EqualFold(string(target), "xml") {
		return nil
	}
	if start != 0 || string(target) != "xml" {
		return s.errf("XML declaration not at the start")
	}
	return s.xmlDecl(body)
}

// xmlDecl checks the pseudo-attributes of the XML declaration: version 1.0, encoding UTF-8 if named,
// standalone yes or no, nothing else.
func (s *xmlScanner) xmlDecl(body []byte) error {
	for _, f := range bytes.Fields(body) {
		k, v, ok := bytes.Cut(f, []byte("="))
		if !ok || len(v) < 2 || (v[0] != '"' && v[0] != '\'') || v[len(v)-1] != v[0] {
			return s.errf("XML declaration %q", body)
		}
		v = v[1 : len(v)-1]
		switch string(k) {
		case "version":
			ok = string(v) == "1.0"
		case "encoding":
			ok = strings.EqualFold(string(v), "utf-8")
		case "standalone":
			ok = string(v) == "yes" || string(v) == "no"
		default:
			ok = false
		}
		if !ok {
			return s.errf("XML declaration %q (only version 1.0 in UTF-8 is read)", body)
		}
	}
	return nil
}

// decodeText checks raw character data and decodes its entities (not in CDATA). It returns raw itself
// when there is nothing to decode, else a slice of the scratch buffer.
func (s *xmlScanner) decodeText(raw []byte, cdata bool) ([]byte, error) {
	plain := true
	for _, c := range raw {
		if c < 0x20 || c >= 0x80 || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		return raw, nil
	}
	out := s.scratch[:0]
	for j := 0; j < len(raw); {
		c := raw[j]
		switch {
		case c == '&' && !cdata:
			semi := bytes.IndexByte(raw[j:min(len(raw), j+12)], ';')
			if semi < 0 {
				return nil, s.errf("'&' not starting an entity")
			}
			r, err := entity(raw[j+1 : j+semi])
			if err != nil {
				return nil, s.errf("%v", err)
			}
			out = utf8.AppendRune(out, r)
			j += semi + 1
		case c == '\r':
			return nil, s.errf("raw carriage return in text (XML turns it into a line feed; a server must write &#13;)")
		case c < 0x20 && c != '\t' && c != '\n':
			return nil, s.errf("control character %#x in text", c)
		case c >= 0x80:
			r, n := utf8.DecodeRune(raw[j:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.errf("invalid UTF-8")
			}
			if !xmlChar(r) {
				return nil, s.errf("character %U not allowed in XML", r)
			}
			out = append(out, raw[j:j+n]...)
			j += n
		default:
			out = append(out, c)
			j++
		}
	}
	s.scratch = out
	return out, nil
}

// xmlChar reports whether r may appear in an XML 1.0 document.
func xmlChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D || (r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

// entity decodes the name between '&' and ';'.
func entity(name []byte) (rune, error) {
	switch string(name) {
	case "amp":
		return '&', nil
	case "lt":
		return '<', nil
	case "gt":
		return '>', nil
	case "quot":
		return '"', nil
	case "apos":
		return '\'', nil
	}
	if len(name) < 2 || name[0] != '#' {
		return 0, fmt.Errorf("unknown entity &%s;", name)
	}
	digits, base := name[1:], 10
	if digits[0] == 'x' {
		digits, base = digits[1:], 16
	}
	if len(digits) == 0 {
		return 0, fmt.Errorf("empty character reference &%s;", name)
	}
	for _, d := range digits {
		ok := '0' <= d && d <= '9' || base == 16 && ('a' <= d && d <= 'f' || 'A' <= d && d <= 'F')
		if !ok {
			return 0, fmt.Errorf("bad character reference &%s;", name)
		}
	}
	v, err := strconv.ParseUint(string(digits), base, 32)
	if err != nil || !xmlChar(rune(v)) {
		return 0, fmt.Errorf("character reference &%s; is not an XML character", name)
	}
	return rune(v), nil
}

// value reads the content of a simple element whose start tag was just read: nothing, one run of text
// or one CDATA section (the form the SDK accepts), then its end tag.
func (s *xmlScanner) value() ([]byte, error) {
	what := s.name
	k, err := s.next()
	if err != nil {
		return nil, err
	}
	if k == tokEnd {
		return []byte{}, nil
	}
	if k != tokText {
		return nil, s.errf("<%s> holds more than text", what)
	}
	v := s.text
	if len(v) > listValueMax {
		return nil, s.errf("<%s> is longer than %d bytes", what, listValueMax)
	}
	if k, err = s.next(); err != nil {
		return nil, err
	}
	if k != tokEnd {
		return nil, s.errf("<%s> holds more than text", what)
	}
	return v, nil
}

// skip skips the rest of the element whose start tag was just read.
func (s *xmlScanner) skip() error {
	depth := len(s.stack)
	for {
		k, err := s.next()
		if err != nil {
			return err
		}
		if k == tokEnd && len(s.stack) < depth {
			return nil
		}
	}
}

// children calls fn for each child element of the element whose start tag was just read, with the
// child's start tag read; fn must consume the child. Whitespace, comments and processing instructions
// between children are skipped; other text is an error.
func (s *xmlScanner) children(fn func(name []byte) error) error {
	parent := s.name
	depth := len(s.stack)
	for {
		k, err := s.next()
		if err != nil {
			return err
		}
		switch k {
		case tokEnd:
			return nil
		case tokText:
			if len(bytes.TrimLeft(s.text, " \t\n")) > 0 {
				return s.errf("text inside <%s>", parent)
			}
		case tokStart:
			if err := fn(s.name); err != nil {
				return err
			}
			if len(s.stack) != depth {
				return s.errf("element inside <%s> not consumed", parent)
			}
		}
	}
}

// is matches an element name as the SDK does (case-insensitively).
func is(name []byte, want string) bool {
	return len(name) == len(want) && (string(name) == want || strings.EqualFold(string(name), want))
}

// decodeListV2 decodes a ListObjectsV2 response body.
func decodeListV2(body []byte) (listResult, error) {
	d := listV2Decoder{s: xmlScanner{b: body}, keyCount: -1}
	if err := d.s.root("ListBucketResult"); err != nil {
		return d.res, err
	}
	if n := bytes.Count(body, []byte("<Contents")); n > 0 {
		d.res.Objects = make([]Object, 0, min(n, listEntriesMax))
	}
	if err := d.s.children(d.element); err != nil {
		return d.res, err
	}
	if err := d.s.toEOF(); err != nil {
		return d.res, err
	}
	if !d.haveTrunc {
		return d.res, errors.New("listing without <IsTruncated>: cannot tell whether it is complete")
	}
	if n := len(d.res.Objects) + len(d.res.Prefixes); d.keyCount >= 0 && d.keyCount != n {
		return d.res, fmt.Errorf("listing says <KeyCount>%d</KeyCount> but holds %d entries", d.keyCount, n)
	}
	return d.res, nil
}

// root reads up to the document's root element and checks its name.
func (s *xmlScanner) root(want string) error {
	for {
		k, err := s.next()
		if err != nil {
			return err
		}
		if k == tokEOF {
			return s.errf("no root element")
		}
		if k == tokStart {
			break
		}
	}
	if string(s.name) != want {
		return s.errf("root element <%s>, want <%s>", s.name, want)
	}
	return nil
}

// toEOF reads what follows the root element (only whitespace, comments and processing
// instructions may).
func (s *xmlScanner) toEOF() error {
	for {
		k, err := s.next()
		if err != nil {
			return err
		}
		if k == tokEOF {
			return nil
		}
	}
}

// listV2Decoder decodes the children of one <ListBucketResult>. Every element that decides what the
// page holds may appear once: a second one is an error, never a silent choice.
type listV2Decoder struct {
	s                            xmlScanner
	res                          listResult
	haveTrunc, haveNext, haveEnc bool
	keyCount                     int // -1: no <KeyCount>
}

// element decodes one child element of <ListBucketResult>.
func (d *listV2Decoder) element(name []byte) error {
	s := &d.s
	switch {
	case is(name, "Contents"), is(name, "CommonPrefixes"):
		if len(d.res.Objects)+len(d.res.Prefixes) >= listEntriesMax {
			return s.errf("more than %d entries in one page", listEntriesMax)
		}
		if is(name, "CommonPrefixes") {
			return d.commonPrefix()
		}
		o, err := s.object()
		if err != nil {
			return err
		}
		d.res.Objects = append(d.res.Objects, o)
		return nil
	case is(name, "IsTruncated"):
		v, err := d.once(&d.haveTrunc, "IsTruncated")
		if err != nil {
			return err
		}
		d.res.Truncated, err = strconv.ParseBool(string(v))
		return err
	case is(name, "NextContinuationToken"):
		v, err := d.once(&d.haveNext, "NextContinuationToken")
		d.res.Next = string(v)
		return err
	case is(name, "KeyCount"):
		return d.keyCountElement()
	case is(name, "MaxKeys"):
		v, err := s.value()
		if err == nil {
			_, err = strconv.ParseInt(string(v), 10, 32)
		}
		return err
	case is(name, "EncodingType"):
		v, err := d.once(&d.haveEnc, "EncodingType")
		if err != nil {
			return err
		}
		switch string(v) {
		case "url":
			d.res.URLEncoded = true
		case "":
		default:
			return s.errf("keys encoded as %q, which was not asked for", v)
		}
		return nil
	case is(name, "ContinuationToken"), is(name, "Delimiter"), is(name, "Name"), is(name, "Prefix"), is(name, "StartAfter"):
		_, err := s.value()
		return err
	}
	return s.skip()
}

// once reads the value of an element that may appear once (seen records that it did).
func (d *listV2Decoder) once(seen *bool, name string) ([]byte, error) {
	v, err := d.s.value()
	if err != nil {
		return nil, err
	}
	if *seen {
		return nil, d.s.errf("two <%s>", name)
	}
	*seen = true
	return v, nil
}

func (d *listV2Decoder) keyCountElement() error {
	v, err := d.s.value()
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(string(v), 10, 32)
	if err != nil || n < 0 {
		return d.s.errf("<KeyCount>%s</KeyCount> is not a count", v)
	}
	if d.keyCount >= 0 {
		return d.s.errf("two <KeyCount>")
	}
	d.keyCount = int(n)
	return nil
}

// commonPrefix reads one <CommonPrefixes>. The prefix is copied at once: a value may point into the
// scanner's scratch buffer, which the whitespace or elements after it inside <CommonPrefixes>
// overwrite.
func (d *listV2Decoder) commonPrefix() error {
	s := &d.s
	var p string
	have := false
	err := s.children(func(name []byte) error {
		if !is(name, "Prefix") {
			return s.skip()
		}
		if have {
			return s.errf("<CommonPrefixes> with two <Prefix>")
		}
		v, err := s.value()
		p, have = string(v), true
		return err
	})
	if err != nil {
		return err
	}
	if !have || len(p) == 0 {
		return s.errf("<CommonPrefixes> without a <Prefix>")
	}
	d.res.Prefixes = append(d.res.Prefixes, p)
	return nil
}

// object reads one <Contents>.
func (s *xmlScanner) object() (Object, error) {
	var f objectFields
	if err := s.children(func(name []byte) error { return s.objectChild(&f, name) }); err != nil {
		return f.o, err
	}
	switch {
	case !f.haveKey || f.o.Key == "":
		return f.o, s.errf("<Contents> without a <Key>")
	case !f.haveSize:
		return f.o, s.errf("<Contents> of %q without <Size>", f.o.Key)
	case !f.haveTime:
		return f.o, s.errf("<Contents> of %q without <LastModified>", f.o.Key)
	}
	return f.o, nil
}

// objectFields is one <Contents> as far as it has been read: each field is accepted once.
type objectFields struct {
	o                                     Object
	haveKey, haveSize, haveTime, haveETag bool
}

// objectChild reads child <name> of a <Contents> into f. Known children that ckguard does not use
// are still checked to be well-formed values; unknown ones are skipped.
func (s *xmlScanner) objectChild(f *objectFields, name []byte) error {
	switch {
	case is(name, "Key"):
		v, err := s.value()
		if err != nil {
			return err
		}
		if f.haveKey {
			return s.errf("<Contents> with two <Key>")
		}
		f.haveKey, f.o.Key = true, string(v)
	case is(name, "Size"):
		v, err := s.value()
		if err != nil {
			return err
		}
		if f.haveSize {
			return s.errf("<Contents> with two <Size>")
		}
		f.haveSize = true
		if f.o.Size, err = strconv.ParseInt(string(v), 10, 64); err != nil || f.o.Size < 0 {
			return s.errf("<Size>%s</Size> is not a size", v)
		}
	case is(name, "LastModified"):
		v, err := s.value()
		if err != nil {
			return err
		}
		if f.haveTime {
			return s.errf("<Contents> with two <LastModified>")
		}
		f.haveTime = true
		if f.o.ModTime, err = parseListTime(v); err != nil {
			return s.errf("<LastModified>: %v", err)
		}
	case is(name, "ETag"):
		v, err := s.value()
		if err != nil {
			return err
		}
		if f.haveETag {
			return s.errf("<Contents> with two <ETag>")
		}
		f.haveETag, f.o.ETag = true, string(bytes.Trim(v, `"`))
	case is(name, "StorageClass"), is(name, "ChecksumAlgorithm"), is(name, "ChecksumType"):
		_, err := s.value()
		return err
	case is(name, "Owner"):
		return s.objectOwner()
	case is(name, "RestoreStatus"):
		return s.objectRestoreStatus()
	default:
		return s.skip()
	}
	return nil
}

// objectOwner checks an object's <Owner>; nothing of it is kept.
func (s *xmlScanner) objectOwner() error {
	return s.children(func(name []byte) error {
		if is(name, "DisplayName") || is(name, "ID") {
			_, err := s.value()
			return err
		}
		return s.skip()
	})
}

// objectRestoreStatus checks an object's <RestoreStatus>: a boolean and a time; nothing of it is kept.
func (s *xmlScanner) objectRestoreStatus() error {
	return s.children(func(name []byte) error {
		switch {
		case is(name, "IsRestoreInProgress"):
			v, err := s.value()
			if err == nil {
				_, err = strconv.ParseBool(string(v))
			}
			return err
		case is(name, "RestoreExpiryDate"):
			v, err := s.value()
			if err == nil {
				_, err = parseListTime(v)
			}
			return err
		}
		return s.skip()
	})
}

// parseListTime parses a timestamp as the SDK does; the form every server sends
// (2006-01-02T15:04:05.000Z) is read without time.Parse.
func parseListTime(v []byte) (time.Time, error) {
	if len(v) == 24 && v[4] == '-' && v[7] == '-' && v[10] == 'T' && v[13] == ':' && v[16] == ':' && v[19] == '.' && v[23] == 'Z' {
		num := func(i, n int) int {
			x := 0
			for _, c := range v[i : i+n] {
				if c < '0' || c > '9' {
					return -1
				}
				x = x*10 + int(c-'0')
			}
			return x
		}
		y, mo, d, h, mi, sec, ms := num(0, 4), num(5, 2), num(8, 2), num(11, 2), num(14, 2), num(17, 2), num(20, 3)
		if y >= 0 && mo >= 1 && mo <= 12 && d >= 1 && d <= daysIn(y, mo) && h >= 0 && h < 24 && mi >= 0 && mi < 60 && sec >= 0 && sec < 60 && ms >= 0 {
			return time.Date(y, time.Month(mo), d, h, mi, sec, ms*1e6, time.UTC), nil
		}
	}
	return smithytime.ParseDateTime(string(v))
}

func daysIn(y, mo int) int {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
