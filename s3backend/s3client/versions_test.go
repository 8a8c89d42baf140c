package s3client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// versionsServer answers ListObjectVersions with the pages given, in turn, and records each
// request's query.
type versionsServer struct {
	mu      sync.Mutex
	pages   []string
	queries []map[string][]string
}

func (s *versionsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := r.URL.Query()["versions"]; !ok || len(s.queries) == len(s.pages) {
		http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
		return
	}
	s.queries = append(s.queries, r.URL.Query())
	w.Header().Set("Content-Type", "application/xml")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><MaxKeys>1000</MaxKeys>%s</ListVersionsResult>`, s.pages[len(s.queries)-1])
}

func version(key, id string) string {
	return `<Version><Key>` + key + `</Key><VersionId>` + id + `</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>"e"</ETag><Size>1</Size></Version>`
}

// XML 1.0 cannot carry every byte a key may hold: Versions asks for URL-encoded keys as ListPage
// does, finds the versions of a key with a control character or invalid UTF-8 (also across pages,
// continuing at the decoded key marker), and refuses an answer with U+FFFD from a server that ignored
// the request, whose keys may not be the objects' (a version of the key would go unseen).
func TestVersionsAskForURLEncodedKeys(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rel    string
		pages  []string
		ids    []string // version ids found
		err    string
		marker string // key-marker of the second request
	}{
		{name: "control character, encoded", rel: "a\x01b",
			pages: []string{`<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>` + version("flink/a%01b", "v1") + version("flink/a%01b%2Fc", "v9")},
			ids:   []string{"v1"}},
		{name: "invalid UTF-8, encoded, two pages", rel: "a\xffb",
			pages: []string{
				`<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated><NextKeyMarker>flink/a%FFb</NextKeyMarker><NextVersionIdMarker>v1</NextVersionIdMarker>` + version("flink/a%FFb", "v1"),
				`<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>` + version("flink/a%FFb", "v0"),
			},
			ids: []string{"v1", "v0"}, marker: "flink/a\xffb"},
		{name: "a plain key from a server that does not encode", rel: "a b",
			pages: []string{`<IsTruncated>false</IsTruncated>` + version("flink/a b", "v1")},
			ids:   []string{"v1"}},
		{name: "garbled by a server that does not encode", rel: "a\x01b",
			pages: []string{`<IsTruncated>false</IsTruncated>` + version("flink/a\uFFFDb", "v1")},
			err:   "U+FFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &versionsServer{pages: tc.pages}
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			cfg := s3client.Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true, AccessKey: "k", SecretKey: "s", MaxAttempts: 1}
			c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "bkt", Prefix: "flink/"})
			if err != nil {
				t.Fatal(err)
			}
			vs, err := c.Versions(context.Background(), tc.rel)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Versions = %+v, %v; want a refusal naming %s", vs, err, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, v := range vs {
				if v.Key != tc.rel {
					t.Errorf("version %s of %q listed for %q", v.VersionID, v.Key, tc.rel)
				}
				ids = append(ids, v.VersionID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.ids, ",") {
				t.Errorf("versions %v, want %v", ids, tc.ids)
			}
			for i, q := range s.queries {
				if got := q["encoding-type"]; len(got) != 1 || got[0] != "url" {
					t.Errorf("request %d: encoding-type %v, want url", i, got)
				}
			}
			if tc.marker != "" && (len(s.queries) < 2 || s.queries[1]["key-marker"][0] != tc.marker) {
				t.Errorf("second request %v, want key-marker %q", s.queries, tc.marker)
			}
		})
	}
}
