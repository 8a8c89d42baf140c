// Package dtsasl protects ckguard's connections to HDFS DataNodes as Hadoop's SASL data transfer does
// (dfs.data.transfer.protection): a DIGEST-MD5 handshake (RFC 2831) on the block access token the
// request carries, then, as negotiated, nothing more (authentication), DIGEST-MD5 integrity (auth-int:
// every message carries an HMAC and a sequence number), DIGEST-MD5 confidentiality (auth-conf, RC4) or,
// when the DataNode offers it for privacy, AES/CTR with keys exchanged under the SASL layer.
//
// It takes the place of the Go HDFS library's own SASL layer for these connections: the library's
// DIGEST-MD5 integrity and confidentiality connections return a wrong byte count from Read whenever a
// read asks for more than is left of the current SASL message (they fill the rest of the buffer from
// the next message but report only that part, so the bytes before it are lost and the stream is
// shifted), and they block for the next message when the current one was only partly used. DataNode
// reads therefore fail on checksums or hang at the end of a block; writes happen to pass. Here a Read
// returns what is left of the current message and reads the next one only when none is left.
//
// Invariant: no byte is returned from a protected connection that was not verified (HMAC, message type
// and sequence number, in order); anything unverifiable fails the read.
package dtsasl

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The SASL quality-of-protection values of RFC 2831, and Hadoop's names for them.
const (
	qopAuth = "auth"      // authentication
	qopInt  = "auth-int"  // integrity
	qopConf = "auth-conf" // privacy
)

// QOP maps a dfs.data.transfer.protection value to its SASL qop ("" for an unknown value).
func QOP(protection string) string {
	switch strings.ToLower(strings.TrimSpace(protection)) {
	case "authentication":
		return qopAuth
	case "integrity":
		return qopInt
	case "privacy":
		return qopConf
	}
	return ""
}

// challenge is a DIGEST-MD5 digest-challenge (RFC 2831 2.1.1): the directives this client uses.
type challenge struct {
	realm, nonce string
	qops         []string
	ciphers      []string
	maxbuf       int
}

// parseChallenge reads a digest-challenge: comma-separated directives name=value, value a token or a
// quoted string (backslash quotes the next character).
func parseChallenge(b []byte) (challenge, error) {
	ch := challenge{maxbuf: 65536}
	dirs, err := parseDirectives(string(b))
	if err != nil {
		return ch, err
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d[0]] && d[0] != "realm" {
			return ch, fmt.Errorf("DIGEST-MD5 challenge: directive %s given twice", d[0])
		}
		seen[d[0]] = true
		switch d[0] {
		case "realm":
			if !seen["realm-set"] {
				ch.realm, seen["realm-set"] = d[1], true
			}
		case "nonce":
			ch.nonce = d[1]
		case "qop":
			ch.qops = splitList(d[1])
		case "cipher":
			ch.ciphers = splitList(d[1])
		case "maxbuf":
			n, err := strconv.Atoi(d[1])
			if err != nil || n < 64 {
				return ch, fmt.Errorf("DIGEST-MD5 challenge: maxbuf %q", d[1])
			}
			ch.maxbuf = n
		case "algorithm":
			if d[1] != "md5-sess" {
				return ch, fmt.Errorf("DIGEST-MD5 challenge: algorithm %q, want md5-sess", d[1])
			}
		}
	}
	if ch.nonce == "" {
		return ch, errors.New("DIGEST-MD5 challenge without a nonce")
	}
	if len(ch.qops) == 0 {
		ch.qops = []string{qopAuth}
	}
	return ch, nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func parseDirectives(s string) ([][2]string, error) {
	var out [][2]string
	for {
		s = strings.TrimLeft(s, " \t\r\n,")
		if s == "" {
			return out, nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("DIGEST-MD5 challenge: directive without a value at %q", s)
		}
		name := strings.ToLower(strings.TrimSpace(s[:eq]))
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val strings.Builder
		if strings.HasPrefix(s, `"`) {
			i, closed := 1, false
			for ; i < len(s); i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
					val.WriteByte(s[i])
					continue
				}
				if s[i] == '"' {
					closed = true
					break
				}
				val.WriteByte(s[i])
			}
			if !closed {
				return nil, fmt.Errorf("DIGEST-MD5 challenge: unterminated value of %s", name)
			}
			s = s[i+1:]
		} else {
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			val.WriteString(strings.TrimSpace(s[:end]))
			s = s[end:]
		}
		out = append(out, [2]string{name, val.String()})
	}
}

// digest is the client side of one DIGEST-MD5 authentication (RFC 2831 2.1.2, md5-sess, no authzid).
type digest struct {
	user, realm, passwd string
	nonce, cnonce, qop  string
	uri                 string // digest-uri: "hdfs/0" for data transfer
}

func md5sum(parts ...string) []byte {
	h := md5.New()
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

// ha1 is H(A1), A1 = { H({user, ":", realm, ":", passwd}), ":", nonce, ":", cnonce }.
func (d *digest) ha1() []byte {
	return md5sum(string(md5sum(d.user, ":", d.realm, ":", d.passwd)), ":", d.nonce, ":", d.cnonce)
}

// value is the response-value (client: A2 begins "AUTHENTICATE:") or the rspauth the server must send
// (A2 begins ":"), 32 lower-case hex digits.
func (d *digest) value(client bool) string {
	a2 := ":" + d.uri
	if client {
		a2 = "AUTHENTICATE" + a2
	}
	if d.qop == qopInt || d.qop == qopConf {
		a2 += ":00000000000000000000000000000000"
	}
	return hex.EncodeToString(md5sum(hex.EncodeToString(d.ha1()), ":", d.nonce, ":00000001:", d.cnonce, ":", d.qop, ":", hex.EncodeToString(md5sum(a2))))
}

// response is the digest-response sent for the challenge (cipher "" unless auth-conf).
func (d *digest) response(cipher string) string {
	r := fmt.Sprintf(`username="%s",realm="%s",nonce="%s",cnonce="%s",nc=00000001,qop=%s,digest-uri="%s",response=%s,charset=utf-8`,
		quote(d.user), quote(d.realm), quote(d.nonce), quote(d.cnonce), d.qop, quote(d.uri), d.value(true))
	if cipher != "" {
		r += ",cipher=" + cipher
	}
	return r
}

func quote(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }

// keys derives the integrity keys Kic/Kis and, for a cipher, the confidentiality keys Kcc/Kcs (RFC
// 2831 2.3 and 2.4: for rc4-40 and rc4-56 only the first 5 or 7 bytes of H(A1) go into Kc).
func (d *digest) keys(cipher string) (kic, kis, kcc, kcs []byte) {
	ha1 := string(d.ha1())
	kic = md5sum(ha1, "Digest session key to client-to-server signing key magic constant")
	kis = md5sum(ha1, "Digest session key to server-to-client signing key magic constant")
	n := len(ha1)
	switch cipher {
	case "rc4-40":
		n = 5
	case "rc4-56":
		n = 7
	}
	kcc = md5sum(ha1[:n], "Digest H(A1) to client-to-server sealing key magic constant")
	kcs = md5sum(ha1[:n], "Digest H(A1) to server-to-client sealing key magic constant")
	return kic, kis, kcc, kcs
}

func newCnonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// chooseCipher picks the strongest of the DataNode's ciphers this client has (RC4 of RFC 2831).
func chooseCipher(offered []string) string {
	for _, c := range []string{"rc4", "rc4-56", "rc4-40"} {
		for _, o := range offered {
			if strings.EqualFold(o, c) {
				return c
			}
		}
	}
	return ""
}
