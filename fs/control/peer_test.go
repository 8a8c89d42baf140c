package control

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestUnknownPeerRefused (review L6): a request whose peer credentials are missing or unreadable is refused;
// it used to count as uid 0 (root). The socket owner's own uid is served.
func TestUnknownPeerRefused(t *testing.T) {
	s := &Server{methods: map[string]reflect.Value{"Get": reflect.ValueOf(impl{}).MethodByName("Get")}, log: slog.Default()}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want int
	}{
		{"no credentials", context.Background(), http.StatusForbidden},
		{"unreadable credentials", context.WithValue(context.Background(), peerKey{}, -1), http.StatusForbidden},
		{"owner", context.WithValue(context.Background(), peerKey{}, os.Geteuid()), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequestWithContext(tc.ctx, "POST", "/v1/Get", strings.NewReader(`["k", 1]`))
			r.SetPathValue("method", "Get")
			w := httptest.NewRecorder()
			s.handle(w, r)
			if w.Code != tc.want {
				t.Errorf("status %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), tc.want)
			}
		})
	}
}
