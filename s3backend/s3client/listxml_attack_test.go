package s3client

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// Hostile and unusual listing bodies: wherever the lean decoder accepts a page, it must be the page the
// SDK reads (a wrong key or prefix is a wrong deletion decision or a gap in the walk); where want is set
// the page is also checked against it, and where refuse is set the lean decoder must refuse.
func TestListDecodeHostileBodies(t *testing.T) {
	withPrefix := func(p, after string) string {
		return listDoc(`<CommonPrefixes><Prefix>` + p + `</Prefix>` + after + `</CommonPrefixes>`)
	}
	for _, tc := range []struct {
		name   string
		doc    string
		want   *listResult
		refuse bool
	}{
		// A prefix with an entity or a non-ASCII byte is decoded into the scanner's scratch buffer; what
		// follows it inside <CommonPrefixes> (whitespace with a newline, another element's text) must not
		// overwrite it before it is copied.
		{name: "entity prefix then newline", doc: withPrefix("caf&#233;/", "\n"),
			want: &listResult{Prefixes: []string{"café/"}}},
		{name: "non-ASCII prefix then indentation", doc: withPrefix("ü/", "\n    "),
			want: &listResult{Prefixes: []string{"ü/"}}},
		{name: "entity prefix then an unknown element with text", doc: withPrefix("a&amp;b/", "<X>&lt;zz</X>"),
			want: &listResult{Prefixes: []string{"a&b/"}}},
		{name: "entity prefix then an attribute with an entity", doc: withPrefix("a&amp;bcd/", `<X a="&amp;&amp;&amp;&amp;"/>`),
			want: &listResult{Prefixes: []string{"a&bcd/"}}},
		{name: "tab and newline keys", doc: listDoc(contents("a\tb") + contents("c\nd")),
			want: &listResult{Objects: []Object{obj("a\tb"), obj("c\nd")}}},
		{name: "carriage return by reference", doc: listDoc(contents("a&#13;b")),
			want: &listResult{Objects: []Object{obj("a\rb")}}},
		{name: "raw carriage return", doc: listDoc(contents("a\rb")), refuse: true},
		{name: "raw CRLF", doc: listDoc(contents("a\r\nb")), refuse: true},
		{name: "literal U+FFFD", doc: listDoc(contents("a\uFFFDb")),
			want: &listResult{Objects: []Object{obj("a\uFFFDb")}}},
		{name: "invalid UTF-8", doc: listDoc(contents("a\xffb")), refuse: true},
		{name: "encoded surrogate bytes", doc: listDoc(contents("a\xed\xa0\x80b")), refuse: true},
		{name: "surrogate reference", doc: listDoc(contents("a&#xD800;b")), refuse: true},
		{name: "surrogate pair references", doc: listDoc(contents("&#xD83D;&#xDE00;")), refuse: true},
		{name: "NUL reference", doc: listDoc(contents("a&#0;b")), refuse: true},
		{name: "U+FFFE reference", doc: listDoc(contents("&#xFFFE;")), refuse: true},
		{name: "beyond U+10FFFF", doc: listDoc(contents("&#x110000;")), refuse: true},
		{name: "astral reference", doc: listDoc(contents("&#x1F600;")), want: &listResult{Objects: []Object{obj("\U0001F600")}}},
		{name: "leading-zero reference", doc: listDoc(contents("&#0065;")), want: &listResult{Objects: []Object{obj("A")}}},
		{name: "uppercase X reference", doc: listDoc(contents("&#X41;")), refuse: true},
		{name: "unknown entity", doc: listDoc(contents("&nbsp;")), refuse: true},
		{name: "bare ampersand", doc: listDoc(contents("a & b")), refuse: true},
		{name: "CDATA key", doc: listDoc(contents("<![CDATA[a&amp;<b]]>")), want: &listResult{Objects: []Object{obj("a&amp;<b")}}},
		{name: "CDATA and text key", doc: listDoc(contents("x<![CDATA[y]]>")), refuse: true},
		{name: "comment splitting a key", doc: listDoc(contents("chk-1<!-- -->/a")), refuse: true},
		{name: "processing instruction splitting a key", doc: listDoc(contents("chk-1<?p x?>/a")), refuse: true},
		{name: "namespaced key", doc: listDoc(`<Contents><s3:Key xmlns:s3="u">k</s3:Key><Size>7</Size><LastModified>2026-11-30T10:20:30.123Z</LastModified><ETag>"abc"</ETag></Contents>`),
			want: &listResult{Objects: []Object{obj("k")}}},
		{name: "two keys", doc: listDoc(`<Contents><Key>a</Key><Key>b</Key><Size>7</Size><LastModified>2026-11-30T10:20:30.123Z</LastModified></Contents>`), refuse: true},
		{name: "Key nested in an unknown element only", doc: listDoc(`<Contents><X><Key>a</Key></X><Size>7</Size><LastModified>2026-11-30T10:20:30.123Z</LastModified></Contents>`), refuse: true},
		{name: "contents without key", doc: listDoc(`<Contents><Size>7</Size><LastModified>2026-11-30T10:20:30.123Z</LastModified></Contents>`), refuse: true},
		{name: "IsTruncated TRUE with token", doc: listHead + `<IsTruncated>TRUE</IsTruncated><NextContinuationToken>t</NextContinuationToken></ListBucketResult>`,
			want: &listResult{Truncated: true, Next: "t"}},
		{name: "IsTruncated yes", doc: listHead + `<IsTruncated>yes</IsTruncated></ListBucketResult>`, refuse: true},
		{name: "IsTruncated padded", doc: listHead + `<IsTruncated> true </IsTruncated></ListBucketResult>`, refuse: true},
		{name: "IsTruncated empty", doc: listHead + `<IsTruncated></IsTruncated></ListBucketResult>`, refuse: true},
		{name: "two IsTruncated", doc: listHead + `<IsTruncated>true</IsTruncated><IsTruncated>false</IsTruncated></ListBucketResult>`, refuse: true},
		{name: "no IsTruncated", doc: listHead + contents("a") + `</ListBucketResult>`, refuse: true},
		{name: "truncated document", doc: strings.TrimSuffix(listDoc(contents("a")), "</ListBucketResult>"), refuse: true},
		{name: "second root", doc: listDoc("") + listDoc(contents("a")), refuse: true},
		{name: "DOCTYPE entity", doc: `<!DOCTYPE x [<!ENTITY e "zz">]>` + listDoc(contents("&e;")), refuse: true},
		{name: "KeyCount short", doc: listDoc(`<KeyCount>2</KeyCount>` + contents("a")), refuse: true},
		{name: "huge key", doc: listDoc(contents(strings.Repeat("k", listValueMax+1))), refuse: true},
		{name: "lowercase element names", doc: listHead + `<istruncated>false</istruncated><contents><key>a</key><size>7</size><lastmodified>2026-11-30T10:20:30.123Z</lastmodified><etag>"abc"</etag></contents></ListBucketResult>`,
			want: &listResult{Objects: []Object{obj("a")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lean, err := decodeListV2([]byte(tc.doc))
			if tc.refuse {
				if err == nil {
					t.Fatalf("accepted as %+v", lean)
				}
				return
			}
			if err != nil {
				t.Fatalf("lean: %v", err)
			}
			sdk, serr := sdkDecode(offlineClient(fixedBody{body: []byte(tc.doc)}))
			if serr != nil {
				t.Fatalf("lean accepted what the SDK refuses (%v): %+v", serr, lean)
			}
			assertSameList(t, lean, sdk)
			if tc.want != nil {
				assertSameList(t, lean, *tc.want)
			}
		})
	}
}

// Between any two elements a server may write indentation, comments and elements the decoder does
// not know (with entities and non-ASCII text of their own): none of it may change a decoded key,
// prefix or token, which may have been decoded into the scanner's scratch buffer just before.
var schemaEnd = regexp.MustCompile(`</(s3:)?(Key|Size|LastModified|ETag|StorageClass|ID|Owner|Contents|Prefix|CommonPrefixes|Name|IsTruncated|NextContinuationToken)><`)

func TestListDecodeMatchesSDKWithFiller(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	fillers := []string{"\n", "\n\t  ", "<!-- é&amp; -->", `<Zz a="&amp;&lt;&#233;">&#233;&amp;ü</Zz>`, "\n<Zz><![CDATA[&amp;]]></Zz>\n", "<?pi ü?>"}
	for i := 0; i < 300; i++ {
		doc, want := genList(r, r.IntN(20))
		// after an end tag of the schema the scanner is between the children of a container, never
		// inside a value (generated keys never hold these names)
		doc = schemaEnd.ReplaceAllStringFunc(doc, func(end string) string {
			return end[:len(end)-1] + fillers[r.IntN(len(fillers))] + "<"
		})
		lean, err := decodeListV2([]byte(doc))
		if err != nil {
			t.Fatalf("lean: %v\n%s", err, doc)
		}
		sdk, err := sdkDecode(offlineClient(fixedBody{body: []byte(doc)}))
		if err != nil {
			t.Fatalf("SDK: %v\n%s", err, doc)
		}
		assertSameList(t, sdk, want)
		assertSameList(t, lean, want)
		if t.Failed() {
			t.Fatalf("response:\n%s", doc)
		}
	}
}

// FuzzListDecodeIndented is FuzzListDecode seeded with indented pages, prefixes and keys with entities
// and non-ASCII characters, and fillers between elements: where the lean decoder accepts a page it is
// the SDK's.
func FuzzListDecodeIndented(f *testing.F) {
	f.Add(listDoc("<CommonPrefixes>\n  <Prefix>caf&#233;/</Prefix>\n</CommonPrefixes>\n<CommonPrefixes><Prefix>ü&amp;/</Prefix><X a=\"&lt;\">&#233;</X></CommonPrefixes>"))
	f.Add(listDoc("\n<Contents>\n <Key>a&#x9;&#13;ü</Key>\n <Size>7</Size>\n <LastModified>2026-11-30T10:20:30.123Z</LastModified>\n <ETag>&quot;x&quot;</ETag>\n</Contents>\n"))
	r := rand.New(rand.NewPCG(7, 8))
	fillers := []string{"\n", "<!-- é -->", `<Zz a="&amp;">&#233;</Zz>`}
	for i := 0; i < 6; i++ {
		doc, _ := genList(r, 1+r.IntN(3))
		f.Add(schemaEnd.ReplaceAllStringFunc(doc, func(end string) string {
			return end[:len(end)-1] + fillers[r.IntN(len(fillers))] + "<"
		}))
	}
	f.Fuzz(func(t *testing.T, doc string) {
		lean, err := decodeListV2([]byte(doc))
		if err != nil {
			return
		}
		sdk, serr := sdkDecode(offlineClient(fixedBody{body: []byte(doc)}))
		if serr != nil {
			t.Fatalf("lean decoder accepted what the SDK refuses (%v): %+v", serr, lean)
		}
		assertSameList(t, lean, sdk)
	})
}
