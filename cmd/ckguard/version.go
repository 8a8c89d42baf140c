package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// buildInfo is what `ckguard version` reports; the release build stamps Version with -X main.version.
type buildInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
}

// MarshalJSON also writes goVersion, the key's name before every command used snake_case; it is kept
// for one release so scripts reading it keep working.
func (b buildInfo) MarshalJSON() ([]byte, error) {
	type plain buildInfo
	return json.Marshal(struct {
		plain
		GoVersionOld string `json:"goVersion"`
	}{plain(b), b.GoVersion})
}

// String is the human form: the version, the commit it was built from (and whether the tree had
// uncommitted changes), the Go toolchain and the platform.
func (b buildInfo) String() string {
	s := "ckguard " + b.Version + " ("
	if b.Revision != "" {
		s += "commit " + b.Revision
		if b.Modified {
			s += ", modified"
		}
		s += ", "
	}
	return s + b.GoVersion + ", " + b.Platform + ")"
}

func currentBuildInfo() buildInfo {
	bi := buildInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Revision: revision}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Revision = s.Value
			case "vcs.modified":
				bi.Modified = s.Value == "true"
			}
		}
	}
	return bi
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the ckguard version, Go version and platform",
		Description: `Prints the version stamped by the build (make build and make release: git describe), the
commit it was built from, the Go toolchain and the platform. A plain go build says "dev" and still
names the commit.

JSON keys: version, go_version, platform, revision, modified (goVersion, the old name of
go_version, is kept for one release).

EXAMPLES:
   ckguard version
   ckguard version --json`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(c *cli.Context) error {
			bi := currentBuildInfo()
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				return enc.Encode(bi)
			}
			fmt.Fprintln(c.App.Writer, bi)
			return nil
		},
	}
}
