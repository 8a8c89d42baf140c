package control

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/pprof"
)

// heapPath serves the mount's heap profile (pprof's protobuf, gzipped): where the daemon's memory
// goes, for operators and developers. Only the callers the queries admit (root, the mount's user)
// get it; the daemon serves no profile anywhere else (no HTTP listener, nothing on the metrics port).
const heapPath = "/debug/heap"

// heap writes the heap profile after a collection (gc=0 skips it: the profile's in-use figures are
// then those of the last collection).
func (s *Server) heap(w http.ResponseWriter, r *http.Request) {
	if !permitted(w, r) {
		return
	}
	if r.URL.Query().Get("gc") != "0" {
		runtime.GC()
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if err := pprof.Lookup("heap").WriteTo(w, 0); err != nil {
		s.log.Debug("control: write heap profile", "err", err)
	}
}

// Heap copies the mount's heap profile (gzipped protobuf, `go tool pprof` reads it) to out, taken
// after a collection when gc.
func (c *Client) Heap(ctx context.Context, out io.Writer, gc bool) error {
	u := "http://ckguard" + heapPath
	if !gc {
		u += "?gc=0"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("control socket %s: heap profile: %w", c.path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return remoteError(resp, "heap profile")
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return fmt.Errorf("control socket %s: heap profile: %w", c.path, err)
	}
	return nil
}
