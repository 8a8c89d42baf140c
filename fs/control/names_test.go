package control

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

type named struct {
	Path  string   `json:"path"`
	Refs  []string `json:"refs"`
	Given string   `json:"given"`
}

type namesAPI interface {
	Echo(ctx context.Context, path string) (*named, error)
}

type namesImpl struct{}

func (namesImpl) Echo(ctx context.Context, path string) (*named, error) {
	return &named{Path: path + "/_metadata", Refs: []string{"plain", path + "/f"}, Given: path}, nil
}

// Names are bytes: a path that is not valid UTF-8 reaches the method, and comes back in its answer,
// with its exact bytes (encoding/json alone makes every invalid byte U+FFFD: a pin would protect
// another name, a listing show a file that does not exist). A client of an older version (no
// Ckguard-Strings header) still gets plain JSON.
func TestNamesKeepTheirBytes(t *testing.T) {
	c := serveAndDial(t, namesImpl{}, reflect.TypeFor[namesAPI]())
	for _, p := range []string{"job/chk-\xff\x01", "job/\x00b64:looks-escaped", "job/plain"} {
		var r *named
		if err := c.Call(context.Background(), "Echo", []any{p}, &r); err != nil {
			t.Fatal(err)
		}
		want := named{Path: p + "/_metadata", Refs: []string{"plain", p + "/f"}, Given: p}
		if r == nil || !reflect.DeepEqual(*r, want) {
			t.Errorf("Echo(%q) = %+v, want %+v", p, r, want)
		}
	}
	// an older client: no header, plain JSON both ways
	body, _ := json.Marshal([]any{"job/plain"})
	req, _ := http.NewRequest(http.MethodPost, "http://ckguard/v1/Echo", bytes.NewReader(body))
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	if resp.Header.Get(stringsHeader) != "" || !strings.Contains(raw.String(), `"given":"job/plain"`) {
		t.Errorf("answer to a client without the header: %v %s", resp.Header, raw.String())
	}
}
