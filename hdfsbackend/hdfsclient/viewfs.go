package hdfsclient

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/colinmarc/hdfs/v2/hadoopconf"
)

// ViewFS: Hadoop's client-side mount table (core-site.xml). A cluster c is the set of keys
//
//	fs.viewfs.mounttable.<c>.link.<path>     = target URI (a directory of another file system)
//	fs.viewfs.mounttable.<c>.linkFallback    = target of every path no link covers
//	fs.viewfs.mounttable.<c>.linkMergeSlash  = target of the whole namespace (no other links)
//	fs.viewfs.mounttable.<c>.homedir         = home directory (not needed to resolve paths)
//
// viewfs:///p (no cluster) names the default table: fs.viewfs.mounttable.default-name-key (or its
// older spelling fs.viewfs.mounttable.default.name.key), else "default".
//
// The invariant this file protects: one store is one HDFS namespace. A viewfs store resolves to exactly
// one hdfs:// directory, and a viewfs reference is tied to the store only when the mount table maps it
// below that directory; anything else (no link, another cluster, a target on other storage, a merge or
// nfly link) is left unmapped, which the index refuses to decide on.

const (
	viewfsPrefix        = "fs.viewfs.mounttable."
	viewfsDefaultKey    = "fs.viewfs.mounttable.default-name-key"
	viewfsDefaultKeyOld = "fs.viewfs.mounttable.default.name.key"
	// maxViewHops bounds a chain of links whose targets are viewfs:// again (and so catches loops).
	maxViewHops = 8
)

// IsViewFS reports whether s is a viewfs: URI.
func IsViewFS(s string) bool { return len(s) >= 7 && strings.EqualFold(s[:7], "viewfs:") }

// MountLink is one link of a mount table: the view directory Path and the URI it stands for.
type MountLink struct {
	Path   string // absolute, clean ("/" for linkMergeSlash)
	Target string // as configured, trailing slash removed
	// Unsupported names the kind of a link this guard cannot follow (linkMerge, linkNfly: several
	// targets); a store at, above or below it is refused, the rest of the table still works.
	Unsupported string
}

// MountTable is the mount table of one cluster.
type MountTable struct {
	Cluster  string
	Links    []MountLink // longest Path first
	Fallback string      // linkFallback target, "" when none
}

// ViewLocation is a parsed viewfs://cluster/path.
type ViewLocation struct {
	Cluster string // as written (cluster names are case-sensitive, like the configuration keys)
	Path    string // absolute, clean
	// Default: the URI named no cluster (viewfs:///p); Cluster is then the default table's name.
	Default bool
}

// DefaultViewCluster is the name of the mount table viewfs:/// means.
func DefaultViewCluster(conf hadoopconf.HadoopConf) (string, error) {
	n, o := strings.TrimSpace(conf[viewfsDefaultKey]), strings.TrimSpace(conf[viewfsDefaultKeyOld])
	switch {
	case n != "" && o != "" && n != o:
		return "", fmt.Errorf("ViewFS: %s=%q and %s=%q disagree on the default mount table; keep one", viewfsDefaultKey, n, viewfsDefaultKeyOld, o)
	case n != "":
		return n, nil
	case o != "":
		return o, nil
	}
	return "default", nil
}

// ParseViewLocation parses viewfs://cluster/path, viewfs:///path and viewfs:/path.
func ParseViewLocation(s string, conf hadoopconf.HadoopConf) (ViewLocation, error) {
	if !IsViewFS(s) {
		return ViewLocation{}, fmt.Errorf("ViewFS URI %q: want viewfs://cluster/path", s)
	}
	rest := s[len("viewfs:"):]
	var v ViewLocation
	if strings.HasPrefix(rest, "//") {
		rest = rest[2:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			v.Cluster, rest = rest, "/"
		} else {
			v.Cluster, rest = rest[:j], rest[j:]
		}
	}
	if strings.ContainsAny(v.Cluster, "@?#:,/") || strings.ContainsAny(rest, "?#\x00") {
		return ViewLocation{}, fmt.Errorf("ViewFS URI %q: user info, ports, queries, fragments and NUL are not supported", s)
	}
	p, err := cleanViewPath(rest)
	if err != nil {
		return ViewLocation{}, fmt.Errorf("ViewFS URI %q: %w", s, err)
	}
	v.Path = p
	if v.Cluster == "" {
		v.Default = true
		if v.Cluster, err = DefaultViewCluster(conf); err != nil {
			return ViewLocation{}, err
		}
	}
	return v, nil
}

// cleanViewPath cleans an absolute path; ".." is refused rather than resolved (a mount table or URI
// that climbs is a mistake, and resolving it could move a name across links).
func cleanViewPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q must be absolute", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("path %q must not contain \"..\"", p)
		}
	}
	return path.Clean(p), nil
}

// ParseMountTable reads the mount table of cluster from conf. A table with no link, a link path that
// is not absolute or climbs, two spellings of one link with different targets, a link nested below
// another (Hadoop refuses those too), linkMergeSlash beside other links, and the link kinds this guard
// cannot follow (linkMerge, linkNfly, linkRegex) are errors.
func ParseMountTable(conf hadoopconf.HadoopConf, cluster string) (MountTable, error) {
	mt := MountTable{Cluster: cluster}
	prefix := viewfsPrefix + cluster + "."
	where := fmt.Sprintf("ViewFS mount table %q (%s* in core-site.xml)", cluster, prefix)
	seen := map[string]string{}
	keys := make([]string, 0)
	for k := range conf {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys) // deterministic errors
	for _, k := range keys {
		name, v := k[len(prefix):], strings.TrimSpace(conf[k])
		target := ""
		if strings.HasPrefix(name, "link.") || name == "linkFallback" || name == "linkMergeSlash" {
			t, err := normTarget(v)
			if err != nil {
				return mt, fmt.Errorf("%s: %s: %w", where, k, err)
			}
			target = t
		}
		switch {
		case strings.HasPrefix(name, "link."):
			lp, err := cleanViewPath(name[len("link."):])
			if err != nil {
				return mt, fmt.Errorf("%s: link %s: %w", where, k, err)
			}
			if err := addLink(&mt, seen, lp, target, k, where); err != nil {
				return mt, err
			}
		case name == "linkMergeSlash":
			if err := addLink(&mt, seen, "/", target, k, where); err != nil {
				return mt, err
			}
		case name == "linkFallback":
			if target == "" {
				return mt, fmt.Errorf("%s: %s is empty", where, k)
			}
			mt.Fallback = target
		case name == "homedir" || name == "name.key":
			// homedir only names a home directory; "default.name.key" is the default-table key
			// (DefaultViewCluster), which shares the prefix of a cluster called "default".
		case strings.HasPrefix(name, "linkMerge."), strings.HasPrefix(name, "linkNfly."):
			kind, lp := name[:strings.IndexByte(name, '.')], name[strings.IndexByte(name, '.')+1:]
			if kind == "linkNfly" {
				// linkNfly.<settings>.<path>: the settings hold no '/', the path starts with one.
				if i := strings.IndexByte(lp, '/'); i >= 0 {
					lp = lp[i:]
				}
			}
			lp, err := cleanViewPath(lp)
			if err != nil {
				return mt, fmt.Errorf("%s: link %s: %w", where, k, err)
			}
			if err := addLink(&mt, seen, lp, kind+" "+v, k, where); err != nil {
				return mt, err
			}
			mt.Links[len(mt.Links)-1].Unsupported = kind
		case strings.HasPrefix(name, "linkRegex."):
			return mt, fmt.Errorf("%s: %s is a regex link, which ckguard does not follow (it cannot tell which paths it takes); give the hdfs:// target with --store instead", where, k)
		default:
			return mt, fmt.Errorf("%s: unknown key %s (want link.<path>, linkFallback, linkMergeSlash or homedir)", where, k)
		}
	}
	if len(mt.Links) == 0 && mt.Fallback == "" {
		return mt, fmt.Errorf("%s: no links (set HADOOP_CONF_DIR to the directory of the core-site.xml that defines it)", where)
	}
	sort.SliceStable(mt.Links, func(i, j int) bool { return len(mt.Links[i].Path) > len(mt.Links[j].Path) })
	for i, a := range mt.Links {
		for _, b := range mt.Links[i+1:] {
			if below(a.Path, b.Path) {
				if b.Path == "/" {
					return mt, fmt.Errorf("%s: linkMergeSlash cannot be combined with other links (%s)", where, a.Path)
				}
				return mt, fmt.Errorf("%s: link %s is nested below link %s; a link must not contain another", where, a.Path, b.Path)
			}
		}
	}
	return mt, nil
}

func addLink(mt *MountTable, seen map[string]string, lp, target, key, where string) error {
	if target == "" {
		return fmt.Errorf("%s: %s has no target", where, key)
	}
	if prev, ok := seen[lp]; ok {
		if prev != target {
			return fmt.Errorf("%s: link %s is defined twice, as %s and %s", where, lp, prev, target)
		}
		return nil
	}
	seen[lp] = target
	mt.Links = append(mt.Links, MountLink{Path: lp, Target: target})
	return nil
}

// below reports whether p is dir or lies below it (both clean and absolute).
func below(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// rel is p relative to dir ("" when equal); p must be below dir.
func rel(p, dir string) string {
	if p == dir {
		return ""
	}
	if dir == "/" {
		return p[1:]
	}
	return p[len(dir)+1:]
}

func joinTarget(target, r string) string {
	switch {
	case r == "":
		return target
	case strings.HasSuffix(target, "/"):
		return target + r
	}
	return target + "/" + r
}

// normTarget cleans a link target URI: scheme://authority/path (or scheme:/path) with a clean path
// and no trailing slash (the root stays "/"); ".." and relative targets are refused.
func normTarget(v string) (string, error) {
	i := strings.IndexByte(v, ':')
	if v == "" {
		return "", fmt.Errorf("empty target")
	}
	if i <= 0 {
		return "", fmt.Errorf("target %q is not a URI (want hdfs://nameservice/path)", v)
	}
	prefix, rest := v[:i+1], v[i+1:]
	if strings.HasPrefix(rest, "//") {
		rest = rest[2:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			prefix, rest = prefix+"//"+rest, "/"
		} else {
			prefix, rest = prefix+"//"+rest[:j], rest[j:]
		}
	}
	if rest == "" {
		rest = "/"
	}
	p, err := cleanViewPath(rest)
	if err != nil {
		return "", fmt.Errorf("target %q: %w", v, err)
	}
	return prefix + p, nil
}

// ResolveDir maps the view directory p to the one target URI that holds it: the link at or above p,
// else the fallback. A directory that contains a link below it (it spans several targets: an internal
// directory of the view) is refused, and so is a directory neither a link nor the fallback covers.
func (mt MountTable) ResolveDir(p string) (string, error) {
	where := fmt.Sprintf("viewfs://%s%s", mt.Cluster, p)
	for _, l := range mt.Links {
		if below(p, l.Path) {
			if l.Unsupported != "" {
				return "", fmt.Errorf("%s is below the ViewFS %s link %s, which has several targets; ckguard guards one HDFS directory: give its hdfs:// target with --store instead", where, l.Unsupported, l.Path)
			}
			return joinTarget(l.Target, rel(p, l.Path)), nil
		}
	}
	for _, l := range mt.Links {
		if below(l.Path, p) {
			return "", fmt.Errorf("%s contains the ViewFS link %s (→ %s): a store must be one HDFS directory; guard each link's target (or a directory below one link) separately", where, l.Path, l.Target)
		}
	}
	if mt.Fallback != "" {
		return joinTarget(mt.Fallback, rel(p, "/")), nil
	}
	return "", fmt.Errorf("%s: no link of mount table %q covers it and it has no linkFallback", where, mt.Cluster)
}

// ResolveView follows v through the mount tables (a target that is viewfs:// again is followed, at
// most maxViewHops times) to the hdfs:// URI of its directory.
func ResolveView(v ViewLocation, conf hadoopconf.HadoopConf) (string, error) {
	start := fmt.Sprintf("viewfs://%s%s", v.Cluster, v.Path)
	visited := map[string]bool{}
	for hop := 0; hop < maxViewHops; hop++ {
		here := v.Cluster + "\x00" + v.Path
		if visited[here] {
			return "", fmt.Errorf("%s: the ViewFS mount tables loop (viewfs://%s%s is reached again)", start, v.Cluster, v.Path)
		}
		visited[here] = true
		mt, err := ParseMountTable(conf, v.Cluster)
		if err != nil {
			return "", fmt.Errorf("resolving %s: %w", start, err)
		}
		t, err := mt.ResolveDir(v.Path)
		if err != nil {
			return "", fmt.Errorf("resolving %s: %w", start, err)
		}
		if IsViewFS(t) {
			if v, err = ParseViewLocation(t, conf); err != nil {
				return "", fmt.Errorf("resolving %s: link target: %w", start, err)
			}
			continue
		}
		i := strings.IndexByte(t, ':')
		if i < 0 || !strings.EqualFold(t[:i], "hdfs") {
			return "", fmt.Errorf("resolving %s: the mount table maps it to %s, which is not HDFS; ckguard guards a viewfs store only when it resolves to hdfs://", start, t)
		}
		return t, nil
	}
	return "", fmt.Errorf("%s: more than %d ViewFS hops (a loop in the mount tables?)", start, maxViewHops)
}

// viewClusters lists the cluster names that have a mount table in conf.
func viewClusters(conf hadoopconf.HadoopConf) []string {
	set := map[string]bool{}
	for k := range conf {
		if !strings.HasPrefix(k, viewfsPrefix) || k == viewfsDefaultKey || k == viewfsDefaultKeyOld {
			continue
		}
		rest := k[len(viewfsPrefix):]
		for _, kind := range []string{".link.", ".linkFallback", ".linkMergeSlash", ".linkMerge.", ".linkNfly.", ".linkRegex.", ".homedir"} {
			if i := strings.Index(rest, kind); i > 0 {
				set[rest[:i]] = true
				break
			}
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// viewAliases are the viewfs URIs that name exactly the HDFS directory r (the store root): for every
// cluster whose mount table parses, each link (or the fallback) whose target resolves, on r's
// namespace, to r.Path or a directory above it, provided the view directory found that way resolves
// forward to r.Path again (so a nested link or a longer link can never make an alias name other data).
// A table that does not parse gives no alias: references through it stay unmapped (refused).
func viewAliases(r Resolved, conf hadoopconf.HadoopConf) []string {
	defCluster, derr := DefaultViewCluster(conf)
	var out []string
	add := func(cluster, vp string) {
		v := ViewLocation{Cluster: cluster, Path: vp}
		t, err := ResolveView(v, conf)
		if err != nil || !sameDir(t, r, conf) {
			return
		}
		out = append(out, "viewfs://"+cluster+vp)
		if derr == nil && cluster == defCluster {
			out = append(out, "viewfs://"+vp)
		}
	}
	for _, c := range viewClusters(conf) {
		mt, err := ParseMountTable(conf, c)
		if err != nil {
			continue
		}
		targets := make([]MountLink, 0, len(mt.Links)+1)
		targets = append(targets, mt.Links...)
		if mt.Fallback != "" {
			targets = append(targets, MountLink{Path: "/", Target: mt.Fallback})
		}
		for _, l := range targets {
			if l.Unsupported != "" {
				continue
			}
			dir, ok := targetDir(l.Target, conf, r)
			if !ok || !below(r.Path, dir) {
				continue
			}
			vp := l.Path
			if rp := rel(r.Path, dir); rp != "" {
				vp = path.Join(l.Path, rp)
			}
			add(c, vp)
		}
	}
	sort.Strings(out)
	return dedup(out)
}

// targetDir is the HDFS directory a link target names when it is on r's namespace.
func targetDir(target string, conf hadoopconf.HadoopConf, r Resolved) (string, bool) {
	if IsViewFS(target) {
		v, err := ParseViewLocation(target, conf)
		if err != nil {
			return "", false
		}
		if target, err = ResolveView(v, conf); err != nil {
			return "", false
		}
	}
	loc, err := ParseLocation(target)
	if err != nil {
		return "", false
	}
	tr, err := Resolve(loc, conf)
	if err != nil || !sameNamespace(tr.Canonical, r) {
		return "", false
	}
	return loc.Path, true
}

// sameNamespace reports whether the canonical authority c names r's file system (r's nameservice or
// one of its NameNodes).
func sameNamespace(c string, r Resolved) bool {
	if c == r.Canonical {
		return true
	}
	for _, a := range r.Aliases {
		if a != "" && a == c {
			return true
		}
	}
	return false
}

// sameDir reports whether the hdfs:// URI t names the directory r.
func sameDir(t string, r Resolved, conf hadoopconf.HadoopConf) bool {
	d, ok := targetDir(t, conf, r)
	return ok && d == r.Path
}

func dedup(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
