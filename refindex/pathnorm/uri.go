package pathnorm

import "strings"

// URI is a parsed, canonicalised URI.
type URI struct {
	Scheme    string // lower case, S3 aliases folded to "s3", "file" for local paths
	Authority string // bucket, namenode host:port; "" for local files
	Segs      []string
}

// String is the canonical form of u: "file:/p" for local files, "scheme://authority/p", or the bare
// relative path.
func (u URI) String() string {
	p := "/" + strings.Join(u.Segs, "/")
	if u.Scheme == "file" {
		return "file:" + p
	}
	if u.Scheme == "" {
		return strings.Join(u.Segs, "/")
	}
	return u.Scheme + "://" + u.Authority + p
}

// s3Aliases are the schemes Flink's S3 file systems (presto, hadoop, native) and Hadoop register for
// the same S3 objects.
var s3Aliases = map[string]bool{"s3": true, "s3a": true, "s3n": true, "s3p": true}

// ParseURI splits and canonicalises a path as Flink writes it. A string without a scheme that starts
// with '/' is a local file; one without a leading slash gets Scheme "" (a relative name).
func ParseURI(s string) URI {
	var u URI
	rest := s
	if i := strings.IndexByte(s, ':'); i > 0 && validScheme(s[:i]) {
		u.Scheme = strings.ToLower(s[:i])
		rest = s[i+1:]
		if strings.HasPrefix(rest, "//") {
			rest = rest[2:]
			j := strings.IndexByte(rest, '/')
			if j < 0 {
				u.Authority, rest = rest, ""
			} else {
				u.Authority, rest = rest[:j], rest[j:]
			}
		}
		if s3Aliases[u.Scheme] {
			u.Scheme = "s3"
		} else if u.Scheme != "viewfs" {
			// (A ViewFS cluster name selects core-site.xml keys, which are case-sensitive: viewfs://C
			// and viewfs://c are different mount tables, so it is not folded either.)
			// Host names are case-insensitive (S3 bucket names are not folded: they are lower case
			// by rule, and a legacy mixed-case bucket is another bucket).
			u.Authority = strings.ToLower(u.Authority)
		}
		if u.Scheme == "file" && u.Authority == "localhost" {
			u.Authority = ""
		}
	} else if strings.HasPrefix(s, "/") {
		u.Scheme = "file"
	}
	u.Segs = cleanSegs(rest, u.Scheme != "")
	return u
}

func validScheme(s string) bool {
	// A single letter is a Windows drive ("C:"), never a Flink scheme.
	if len(s) < 2 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// cleanSegs drops empty and "." segments and resolves "..". For absolute paths ".." at the root stays
// at the root (as the file system does); for relative names it is kept so the caller sees the climb.
func cleanSegs(p string, absolute bool) []string {
	// The test is on p, not q: "//x" trimmed once is "/x", which has no "//" but would split into an empty
	// first segment.
	if q := strings.TrimPrefix(p, "/"); q != "" && !strings.Contains(p, "//") && !strings.HasSuffix(q, "/") &&
		!strings.Contains("/"+q+"/", "/./") && !strings.Contains("/"+q+"/", "/../") {
		return strings.Split(q, "/") // already clean: one allocation
	}
	var out []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(out) > 0 && out[len(out)-1] != ".." {
				out = out[:len(out)-1]
			} else if !absolute {
				out = append(out, "..")
			}
		default:
			out = append(out, s)
		}
	}
	return out
}
