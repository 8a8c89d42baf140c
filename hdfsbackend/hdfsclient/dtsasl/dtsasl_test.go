package dtsasl

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestDigestRFC2831Example: the response and rspauth of RFC 2831's example exchange (section 4).
func TestDigestRFC2831Example(t *testing.T) {
	d := &digest{user: "chris", realm: "elwood.innosoft.com", passwd: "secret", nonce: "OA6MG9tEQGm2hh", cnonce: "OA6MHXh6VqTrRk", qop: qopAuth, uri: "imap/elwood.innosoft.com"}
	if got := d.value(true); got != "d388dad90d4bbd760a152321f2143af7" {
		t.Errorf("response = %s", got)
	}
	if got := d.value(false); got != "ea40f60335c427b5527b84dbabcdfffd" {
		t.Errorf("rspauth = %s", got)
	}
	for _, want := range []string{`username="chris"`, `qop=auth,`, `nc=00000001`, `digest-uri="imap/elwood.innosoft.com"`, `response=d388dad90d4bbd760a152321f2143af7`} {
		if r := d.response(""); !strings.Contains(r, want) {
			t.Errorf("response %q lacks %q", r, want)
		}
	}
}

func TestParseChallenge(t *testing.T) {
	ch, err := parseChallenge([]byte(`realm="0",nonce="a\"b,c",qop="auth,auth-int,auth-conf",charset=utf-8,maxbuf=4096,cipher="3des,rc4,des,rc4-56,rc4-40",algorithm=md5-sess`))
	if err != nil {
		t.Fatal(err)
	}
	if ch.realm != "0" || ch.nonce != `a"b,c` || !slices.Equal(ch.qops, []string{qopAuth, qopInt, qopConf}) || ch.maxbuf != 4096 || chooseCipher(ch.ciphers) != "rc4" {
		t.Errorf("parsed %+v", ch)
	}
	for _, bad := range []string{`realm="0"`, `nonce="x`, `nonce=x,algorithm=md5`, `nonce=x,maxbuf=1`, `nonce=x,nonce=y`, `noequals`} {
		if _, err := parseChallenge([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// pair is the client's and the peer's layers of one negotiated session (the peer's out is the
// client's in).
func pair(t *testing.T, conf bool) (client, peer *saslConn, cEnd, pEnd net.Conn) {
	t.Helper()
	d := &digest{user: "dXNlcg==", realm: "0", passwd: "cGFzcw==", nonce: "n", cnonce: "c", qop: qopInt, uri: "hdfs/0"}
	ciph := ""
	if conf {
		d.qop, ciph = qopConf, "rc4"
	}
	kic, kis, kcc, kcs := d.keys(ciph)
	mk := func(ki, kc []byte) *layer {
		l, err := newLayer(ki, kc, conf)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	cEnd, pEnd = net.Pipe()
	// A bound, not an assertion: a read that waited for a message never sent fails instead of hanging.
	for _, c := range []net.Conn{cEnd, pEnd} {
		_ = c.SetDeadline(time.Now().Add(time.Minute))
	}
	t.Cleanup(func() { cEnd.Close(); pEnd.Close() })
	return &saslConn{Conn: cEnd, out: mk(kic, kcc), in: mk(kis, kcs), maxOut: 100},
		&saslConn{Conn: pEnd, out: mk(kis, kcs), in: mk(kic, kcc), maxOut: 1 << 16}, cEnd, pEnd
}

// TestReadAcrossMessages: reads of any size, across the DataNode's message boundaries, return exactly
// the bytes sent and a count that covers them; a read asking for more than is left of a message gets
// that rest without waiting for the next message (the DataNode sends the next only after the client
// answered). This is where the library's layers lose bytes.
func TestReadAcrossMessages(t *testing.T) {
	for _, conf := range []bool{false, true} {
		client, peer, _, _ := pair(t, conf)
		msgs := [][]byte{bytes.Repeat([]byte("a"), 7), bytes.Repeat([]byte("b"), 300), []byte("c")}
		go func() {
			for _, m := range msgs {
				if _, err := peer.Write(m); err != nil {
					return
				}
				ack := make([]byte, 3)
				if _, err := io.ReadFull(peer, ack); err != nil {
					return
				}
			}
		}()
		for i, m := range msgs {
			var got []byte
			for len(got) < len(m) {
				buf := make([]byte, 5+len(m)) // always more than is left
				n, err := client.Read(buf[:min(len(buf), 2+len(got))])
				if err != nil {
					t.Fatalf("conf %v: message %d: %v", conf, i, err)
				}
				got = append(got, buf[:n]...)
			}
			if !bytes.Equal(got, m) {
				t.Fatalf("conf %v: message %d read as %q", conf, i, got)
			}
			if _, err := client.Write([]byte("ack")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestWriteSplitsAndPeerReads: a write larger than the DataNode's maxbuf goes as several messages and
// arrives whole and in order.
func TestWriteSplitsAndPeerReads(t *testing.T) {
	for _, conf := range []bool{false, true} {
		client, peer, _, _ := pair(t, conf)
		data := make([]byte, 1000)
		for i := range data {
			data[i] = byte(i * 7)
		}
		go func() { _, _ = client.Write(data) }()
		got := make([]byte, len(data))
		if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("conf %v: the peer read %v, %v", conf, len(got), err)
		}
		if client.out.seq != 10 {
			t.Errorf("conf %v: %d messages for 1000 bytes at 100, want 10", conf, client.out.seq)
		}
	}
}

// TestTamperedMessagesFail: a message altered in its payload, its HMAC, its type or its sequence
// number fails the read and returns no byte of it.
func TestTamperedMessagesFail(t *testing.T) {
	for _, conf := range []bool{false, true} {
		for _, at := range []string{"payload", "mac", "type", "seq", "short"} {
			client, peer, _, pEnd := pair(t, conf)
			sealed := peer.out.wrap([]byte("block data"))
			switch at {
			case "payload":
				sealed[0] ^= 1
			case "mac":
				sealed[len(sealed)-7] ^= 1
			case "type":
				sealed[len(sealed)-5] = 2
			case "seq":
				sealed[len(sealed)-1] = 9
			case "short":
				sealed = sealed[:10]
			}
			go func() {
				frame := binary.BigEndian.AppendUint32(nil, uint32(len(sealed)))
				_, _ = pEnd.Write(append(frame, sealed...))
			}()
			buf := make([]byte, 64)
			if n, err := client.Read(buf); err == nil || n != 0 {
				t.Errorf("conf %v, %s altered: read %q, %v", conf, at, buf[:n], err)
			}
		}
	}
}

func TestRequestToken(t *testing.T) {
	token := protowire.AppendTag(nil, 1, protowire.BytesType)
	token = protowire.AppendBytes(token, []byte("ident"))
	token = protowire.AppendTag(token, 2, protowire.BytesType)
	token = protowire.AppendBytes(token, []byte("secret"))
	token = protowire.AppendTag(token, 3, protowire.BytesType)
	token = protowire.AppendBytes(token, []byte("HDFS_BLOCK_TOKEN"))
	base := protowire.AppendTag(nil, 1, protowire.BytesType) // the block
	base = protowire.AppendBytes(base, []byte{0x0a, 0x01, 'p'})
	base = protowire.AppendTag(base, 2, protowire.BytesType)
	base = protowire.AppendBytes(base, token)
	header := protowire.AppendTag(nil, 1, protowire.BytesType)
	header = protowire.AppendBytes(header, base)
	header = protowire.AppendTag(header, 2, protowire.BytesType)
	header = protowire.AppendBytes(header, []byte("DFSClient_x"))
	read := protowire.AppendTag(nil, 1, protowire.BytesType)
	read = protowire.AppendBytes(read, header)
	read = protowire.AppendTag(read, 2, protowire.VarintType)
	read = protowire.AppendVarint(read, 0)
	req := func(op byte, msg []byte) []byte {
		return append(protowire.AppendVarint([]byte{0, 0x1c, op}, uint64(len(msg))), msg...)
	}
	checksum := protowire.AppendTag(nil, 1, protowire.BytesType)
	checksum = protowire.AppendBytes(checksum, base)
	wantUser, wantPass := base64.StdEncoding.EncodeToString([]byte("ident")), base64.StdEncoding.EncodeToString([]byte("secret"))
	for name, r := range map[string][]byte{"read": req(opReadBlock, read), "write": req(opWriteBlock, read), "checksum": req(opBlockChecksum, checksum)} {
		u, p, err := requestToken(r)
		if err != nil || u != wantUser || p != wantPass {
			t.Errorf("%s: %q %q %v", name, u, p, err)
		}
	}
	noToken := protowire.AppendTag(nil, 1, protowire.BytesType)
	noToken = protowire.AppendBytes(noToken, []byte{0x0a, 0x01, 'p'})
	for name, r := range map[string][]byte{
		"cut short":  req(opReadBlock, read)[:20],
		"unknown op": req(0x52, read),
		"no token":   req(opBlockChecksum, append(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendBytes(nil, noToken)...)),
	} {
		if _, _, err := requestToken(r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
