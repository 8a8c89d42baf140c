package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex/flinkrest"
)

// flinkRESTFlags are the options of the Flink REST endpoints a mount polls (and `ckguard jobs` asks).
// Secrets come from files, never from the command line (ps shows it to every user).
func flinkRESTFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "flink-rest", Usage: "a Flink JobManager's REST `URL` (http://jm:8081; repeatable: several clusters or JobManagers): the folders of every job it reports not terminated, their restore points and latest checkpoints are protected whatever their age; while it does not answer, the job folders it may own stay protected"},
		&cli.StringFlag{Name: "flink-rest-ca", Usage: "PEM `FILE` of the certificate authorities to trust for https --flink-rest endpoints (default: the system's)"},
		&cli.BoolFlag{Name: "flink-rest-insecure", Usage: "do not verify the --flink-rest endpoints' TLS certificates (tests only)"},
		&cli.StringFlag{Name: "flink-rest-user", Usage: "`USER` for HTTP basic authentication to the --flink-rest endpoints (with --flink-rest-password-file)"},
		&cli.StringFlag{Name: "flink-rest-password-file", Usage: "`FILE` holding the basic authentication password (first line)"},
		&cli.StringFlag{Name: "flink-rest-token-file", Usage: "`FILE` holding a bearer token for the --flink-rest endpoints (first line)"},
		durationFlag("flink-rest-timeout", flinkrest.DefaultTimeout, "bound on each request to a --flink-rest endpoint"),
	}
}

// flinkRESTConfigs reads the flags into one config per endpoint.
func flinkRESTConfigs(c *cli.Context) ([]flinkrest.Config, error) {
	urls := c.StringSlice("flink-rest")
	if len(urls) == 0 {
		for _, f := range []string{"flink-rest-ca", "flink-rest-user", "flink-rest-password-file", "flink-rest-token-file"} {
			if c.IsSet(f) {
				return nil, fmt.Errorf("--%s without --flink-rest: give the endpoint it is for", f)
			}
		}
		return nil, nil
	}
	base := flinkrest.Config{CAFile: c.String("flink-rest-ca"), InsecureSkipVerify: c.Bool("flink-rest-insecure"),
		Username: c.String("flink-rest-user"), Timeout: c.Duration("flink-rest-timeout")}
	if f := c.String("flink-rest-password-file"); f != "" {
		if base.Username == "" {
			return nil, fmt.Errorf("--flink-rest-password-file needs --flink-rest-user")
		}
		p, err := firstLine(f)
		if err != nil {
			return nil, fmt.Errorf("--flink-rest-password-file: %w", err)
		}
		base.Password = p
	}
	if f := c.String("flink-rest-token-file"); f != "" {
		t, err := firstLine(f)
		if err != nil {
			return nil, fmt.Errorf("--flink-rest-token-file: %w", err)
		}
		base.Token = t
	}
	out := make([]flinkrest.Config, 0, len(urls))
	for _, u := range urls {
		cfg := base
		cfg.URL = u
		out = append(out, cfg)
	}
	return out, nil
}

// flinkClients builds the endpoints' clients.
func flinkClients(c *cli.Context) ([]*flinkrest.Client, error) {
	cfgs, err := flinkRESTConfigs(c)
	if err != nil {
		return nil, err
	}
	var out []*flinkrest.Client
	for _, cfg := range cfgs {
		cl, err := flinkrest.New(cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, cl)
	}
	return out, nil
}

func firstLine(f string) (string, error) {
	b, err := os.ReadFile(f)
	if err != nil {
		return "", err
	}
	s, _, _ := strings.Cut(string(b), "\n")
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("%s is empty", f)
	}
	return s, nil
}
