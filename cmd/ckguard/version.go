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
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
}

func currentBuildInfo() buildInfo {
	bi := buildInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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
		Description: `Prints the version stamped by the release build (make release), the Go toolchain and the
platform. Development builds say "dev".

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
			fmt.Fprintf(c.App.Writer, "ckguard %s (%s, %s)\n", bi.Version, bi.GoVersion, bi.Platform)
			return nil
		},
	}
}
