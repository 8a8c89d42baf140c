// Package hdfscli is the CLI plumbing of the HDFS backend: the --hdfs-* flags every command taking
// --store accepts, and opening an hdfs:// store. cmd/ckguard calls it; it holds no state.
package hdfscli

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsstore"
	"github.com/ckguard/ckguard/internal/duration"
)

// IsURL reports whether a --store value names an HDFS location (hdfs://…, hdfs:///…, hdfs:/…), or a
// ViewFS one (viewfs://cluster/…, resolved through HADOOP_CONF_DIR's mount table to one hdfs:// directory).
func IsURL(store string) bool {
	return len(store) >= 5 && strings.EqualFold(store[:5], "hdfs:") || hdfsclient.IsViewFS(store)
}

// Flags are the HDFS client flags. The NameNodes, nameservices, fs.defaultFS and Kerberos settings come
// from HADOOP_CONF_DIR (core-site.xml, hdfs-site.xml); the user from HADOOP_USER_NAME or the login.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "hdfs-keytab", EnvVars: []string{"CKGUARD_HDFS_KEYTAB"}, Usage: "Kerberos keytab to log in to HDFS with (with --hdfs-principal); default: the ticket cache ($KRB5CCNAME, a FILE: cache, read once at start and not renewed) when hadoop.security.authentication is kerberos"},
		&cli.StringFlag{Name: "hdfs-principal", EnvVars: []string{"CKGUARD_HDFS_PRINCIPAL"}, Usage: "Kerberos principal (name@REALM) of --hdfs-keytab"},
		duration.Flag("hdfs-timeout", 30*time.Second, "bound on every read and write of one NameNode or DataNode connection; then the file operation fails with EIO"),
	}
}

// Options are the flag values.
type Options struct {
	Keytab, Principal string
	Timeout           time.Duration
	// Logger gets the client's WARNs (a ticket cache not renewed in time); default slog.Default().
	Logger *slog.Logger
}

// FromFlags reads the flags.
func FromFlags(c *cli.Context) Options {
	return Options{Keytab: c.String("hdfs-keytab"), Principal: c.String("hdfs-principal"), Timeout: c.Duration("hdfs-timeout")}
}

// Dial connects to the cluster named by uri (see hdfsclient.ConfigFromEnv).
func Dial(ctx context.Context, uri string, o Options) (*hdfsclient.Client, hdfsclient.Resolved, error) {
	cfg, err := hdfsclient.ConfigFromEnv(uri, hdfsclient.Kerberos{Keytab: o.Keytab, Principal: o.Principal})
	if err != nil {
		return nil, hdfsclient.Resolved{}, err
	}
	cfg.RPCTimeout, cfg.Logger = o.Timeout, o.Logger
	cl, err := hdfsclient.Dial(ctx, cfg)
	if err != nil {
		return nil, hdfsclient.Resolved{}, err
	}
	return cl, cfg.Resolved, nil
}

// OpenStore opens the hdfs:// store named by uri and checks that its directory exists.
func OpenStore(ctx context.Context, uri string, o Options) (*hdfsstore.Store, error) {
	cl, res, err := Dial(ctx, uri, o)
	if err != nil {
		return nil, err
	}
	st := hdfsstore.New(cl, res, hdfsstore.Options{})
	if _, err := st.Stat(ctx, ""); err != nil {
		_ = cl.Close()
		return nil, err
	}
	return st, nil
}
