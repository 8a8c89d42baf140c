package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, out string)
	}{
		{"human", []string{"ckguard", "version"}, func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "ckguard "+version+" (") || !strings.Contains(out, runtime.GOARCH) {
				t.Fatalf("unexpected output %q", out)
			}
		}},
		{"json", []string{"ckguard", "version", "--json"}, func(t *testing.T, out string) {
			var bi buildInfo
			if err := json.Unmarshal([]byte(out), &bi); err != nil {
				t.Fatalf("not JSON: %v: %q", err, out)
			}
			if bi.Version != version || bi.Platform != runtime.GOOS+"/"+runtime.GOARCH {
				t.Fatalf("unexpected build info %+v", bi)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			app := newApp()
			app.Writer = &buf
			if err := app.Run(tt.args); err != nil {
				t.Fatal(err)
			}
			tt.check(t, buf.String())
		})
	}
}
