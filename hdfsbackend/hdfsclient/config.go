package hdfsclient

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path"
	"sort"
	"strings"

	"github.com/colinmarc/hdfs/v2/hadoopconf"
)

// DefaultPort is the NameNode RPC port an hdfs:// authority without a port means.
const DefaultPort = "8020"

// Location is a parsed hdfs:// store URI.
type Location struct {
	// Authority as written: "nn:8020", "nn" (port 8020), a nameservice ("ns1"), several addresses
	// ("nn1:8020,nn2:8020"), or "" for the default file system (hdfs:///path, fs.defaultFS).
	Authority string
	// Path is the absolute, clean directory ("/flink/checkpoints"; "/" for the root).
	Path string
}

// String is the URI as written back (hdfs://authority/path).
func (l Location) String() string { return "hdfs://" + l.Authority + l.Path }

// ParseLocation parses hdfs://authority/path, hdfs:///path and hdfs:/path (the default file system).
// The scheme is case-insensitive. The path must not climb above the root.
func ParseLocation(s string) (Location, error) {
	i := strings.IndexByte(s, ':')
	if i < 0 || !strings.EqualFold(s[:i], "hdfs") {
		return Location{}, fmt.Errorf("HDFS store %q: want hdfs://namenode:8020/path, hdfs://nameservice/path or hdfs:///path", s)
	}
	rest := s[i+1:]
	var l Location
	if strings.HasPrefix(rest, "//") {
		rest = rest[2:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			l.Authority, rest = rest, "/"
		} else {
			l.Authority, rest = rest[:j], rest[j:]
		}
	}
	if strings.ContainsAny(l.Authority, "@?#") || strings.ContainsAny(rest, "?#\x00") {
		return Location{}, fmt.Errorf("HDFS store %q: user info, queries, fragments and NUL are not supported", s)
	}
	if !strings.HasPrefix(rest, "/") {
		return Location{}, fmt.Errorf("HDFS store %q: the path must be absolute", s)
	}
	for _, seg := range strings.Split(rest, "/") {
		if seg == ".." {
			return Location{}, fmt.Errorf("HDFS store %q: the path must not contain \"..\"", s)
		}
	}
	l.Authority = strings.ToLower(l.Authority)
	l.Path = path.Clean(rest)
	return l, nil
}

// Resolved is a Location with the NameNode addresses to dial and the canonical names of the store.
type Resolved struct {
	Location
	// Addresses are the NameNode RPC addresses (host:port), tried in order (HA: the active one answers).
	Addresses []string
	// Nameservice is the logical HA name when the authority (or fs.defaultFS) is one; "" otherwise.
	Nameservice string
	// Canonical is the authority Flink's URIs are compared under: the nameservice, or host:port.
	Canonical string
	// Aliases are the other authorities naming the same file system: "" (hdfs:///… when it is the
	// default FS) and, for a nameservice, each of its NameNodes' host:port.
	Aliases []string
	// ViewURIs are the viewfs:// URIs whose mount tables (core-site.xml) map exactly to Path on this
	// file system (see viewAliases); the store was given as one of them when View is set.
	ViewURIs []string
	// View is the viewfs:// store URI as given ("" for an hdfs:// store).
	View string
}

// ResolveStore parses and resolves a --store URI: hdfs://… directly, viewfs://cluster/path through
// the cluster's mount table to the one hdfs:// directory it names. Both get the viewfs:// aliases of
// the resolved directory from every mount table in conf.
func ResolveStore(uri string, conf hadoopconf.HadoopConf) (Resolved, error) {
	if impl := conf["fs.hdfs.impl"]; strings.Contains(impl, "ViewFileSystemOverloadScheme") {
		// hdfs:// URIs then go through mount tables too; this client reads them as plain HDFS.
		return Resolved{}, fmt.Errorf("HADOOP_CONF_DIR sets fs.hdfs.impl=%s (ViewFS overload scheme), which ckguard does not support: its hdfs:// paths would not name what Flink's do", impl)
	}
	hdfsURI, view := uri, ""
	if IsViewFS(uri) {
		v, err := ParseViewLocation(uri, conf)
		if err != nil {
			return Resolved{}, err
		}
		if hdfsURI, err = ResolveView(v, conf); err != nil {
			return Resolved{}, fmt.Errorf("HDFS store %s: %w", uri, err)
		}
		view = uri
	}
	loc, err := ParseLocation(hdfsURI)
	if err != nil {
		return Resolved{}, err
	}
	r, err := Resolve(loc, conf)
	if err != nil {
		return Resolved{}, err
	}
	r.View = view
	r.ViewURIs = viewAliases(r, conf)
	return r, nil
}

// Resolve finds the NameNodes of l from the Hadoop configuration conf (nil: none):
//   - "" (hdfs:///…): fs.defaultFS;
//   - a nameservice listed in dfs.nameservices or dfs.ha.namenodes.<ns>: its
//     dfs.namenode.rpc-address.<ns>.<nn> addresses (or dfs.namenode.rpc-address.<ns>);
//   - host[:port][,host[:port]…]: those addresses, port 8020 when none is given.
func Resolve(l Location, conf hadoopconf.HadoopConf) (Resolved, error) {
	r := Resolved{Location: l}
	auth := l.Authority
	defaultAuth := ""
	d := conf["fs.defaultFS"]
	if d == "" {
		d = conf["fs.default.name"]
	}
	// A default file system of another scheme (viewfs:///, s3a://…) gives hdfs:/// no meaning.
	if d != "" && (len(d) < 5 || !strings.EqualFold(d[:5], "hdfs:")) {
		d = ""
	}
	if d != "" {
		dl, err := ParseLocation(d)
		if err != nil {
			return r, fmt.Errorf("fs.defaultFS %q in HADOOP_CONF_DIR: %w", d, err)
		}
		defaultAuth = dl.Authority
	}
	if auth == "" {
		if defaultAuth == "" {
			return r, fmt.Errorf("HDFS store %s names the default file system, but no fs.defaultFS is configured (set HADOOP_CONF_DIR to a directory with core-site.xml, or write hdfs://namenode:8020%s)", l, l.Path)
		}
		auth = defaultAuth
	}
	if nns := nameserviceAddrs(conf, auth); len(nns) > 0 {
		r.Addresses, r.Nameservice, r.Canonical = nns, auth, auth
		r.Aliases = append(r.Aliases, nns...)
	} else {
		for _, a := range strings.Split(auth, ",") {
			if a == "" {
				return r, fmt.Errorf("HDFS store %s: empty NameNode address", l)
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				a = net.JoinHostPort(strings.Trim(a, "[]"), DefaultPort)
			}
			r.Addresses = append(r.Addresses, a)
		}
		r.Canonical = r.Addresses[0]
		r.Aliases = append(r.Aliases, r.Addresses[1:]...)
	}
	if defaultAuth != "" && (defaultAuth == auth || defaultAuth == r.Canonical) {
		r.Aliases = append(r.Aliases, "")
	}
	return r, nil
}

// nameserviceAddrs returns the RPC addresses of the HA nameservice ns, or nil when ns is not one.
func nameserviceAddrs(conf hadoopconf.HadoopConf, ns string) []string {
	if ns == "" || strings.ContainsAny(ns, ":,") {
		return nil
	}
	var out []string
	if ids := conf["dfs.ha.namenodes."+ns]; ids != "" {
		for _, id := range strings.Split(ids, ",") {
			if a := conf["dfs.namenode.rpc-address."+ns+"."+strings.TrimSpace(id)]; a != "" {
				out = append(out, a)
			}
		}
	}
	if a := conf["dfs.namenode.rpc-address."+ns]; a != "" && len(out) == 0 {
		out = append(out, a)
	}
	sort.Strings(out) // the configured order is not a preference; a stable order keeps aliases stable
	return out
}

// LoadConf reads core-site.xml and hdfs-site.xml from HADOOP_CONF_DIR (or $HADOOP_HOME/conf); nil when
// neither is set. A configuration that exists but does not parse is an error, never ignored.
func LoadConf() (hadoopconf.HadoopConf, error) {
	conf, err := hadoopconf.LoadFromEnvironment()
	if err != nil {
		return nil, fmt.Errorf("reading the Hadoop configuration (HADOOP_CONF_DIR): %w", err)
	}
	return conf, nil
}

// UserName is the HDFS user for simple authentication: HADOOP_USER_NAME, else the login name (as the
// Hadoop client does). With Kerberos the principal decides instead.
func UserName() (string, error) {
	if u := os.Getenv("HADOOP_USER_NAME"); u != "" {
		return u, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("HDFS user: set HADOOP_USER_NAME (%w)", err)
	}
	if u.Username == "" {
		return "", errors.New("HDFS user: the login has no name; set HADOOP_USER_NAME")
	}
	return u.Username, nil
}
