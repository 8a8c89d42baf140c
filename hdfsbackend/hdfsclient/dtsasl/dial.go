package dtsasl

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// Dialer dials DataNodes with Dial and protects each connection as the DataNode asks, within Allowed.
type Dialer struct {
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Allowed are the qops this client accepts (QOP of dfs.data.transfer.protection's values); the
	// strongest one the DataNode offers is used.
	Allowed []string
}

// DialContext dials addr. The handshake waits for the connection's first write: the library's
// request (read, write or checksum of a block) carries the block access token the handshake needs.
// A DataNode on a privileged port is not asked for SASL, as Hadoop's client does not (that DataNode
// is secured by its port).
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	raw, err := d.Dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if a, ok := raw.RemoteAddr().(*net.TCPAddr); ok && a.Port < 1024 {
		return raw, nil
	}
	return &conn{Conn: raw, raw: raw, allowed: d.Allowed, ready: make(chan struct{})}, nil
}

// conn is a DataNode connection whose protection is set up at its first Write.
type conn struct {
	net.Conn // the protected connection once ready (raw before)
	raw      net.Conn
	allowed  []string

	once  sync.Once
	ready chan struct{} // closed when the handshake is done (err says how)
	err   error
}

func (c *conn) Write(b []byte) (int, error) {
	first := false
	c.once.Do(func() {
		first = true
		c.err = c.setUp(b)
		close(c.ready)
	})
	if c.err != nil {
		return 0, c.err
	}
	if first {
		return len(b), nil // setUp sent b
	}
	return c.Conn.Write(b)
}

func (c *conn) Read(b []byte) (int, error) {
	<-c.ready // the library writes its request before it reads; a read before it waits
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(b)
}

func (c *conn) Close() error {
	return c.raw.Close()
}

// setUp protects the connection with the token of the request req and sends req through it.
func (c *conn) setUp(req []byte) error {
	if bytes.HasPrefix(req, saslMagic) {
		// The library negotiates itself (dfs.encrypt.data.transfer: a NameNode data encryption key).
		_, err := c.raw.Write(req)
		return err
	}
	ident, passwd, err := requestToken(req)
	if err != nil {
		return fmt.Errorf("DataNode %s: SASL data transfer: %w", c.raw.RemoteAddr(), err)
	}
	p, err := handshake(c.raw, ident, passwd, c.allowed)
	if err != nil {
		return fmt.Errorf("DataNode %s: SASL data transfer: %w", c.raw.RemoteAddr(), err)
	}
	c.Conn = p
	_, err = p.Write(req)
	return err
}

var saslMagic = []byte{0xDE, 0xAD, 0xBE, 0xEF}

// The data transfer ops that carry a block token (Hadoop's Op codes) and where the BaseHeaderProto
// is in their request: in a ClientOperationHeaderProto (field 1) for read and write, directly
// (field 1) for the block checksum.
const (
	opWriteBlock    = 0x50
	opReadBlock     = 0x51
	opBlockChecksum = 0x55
)

// requestToken finds the block access token in a data transfer request {version int16, op byte,
// varint length, Op*Proto}, the whole request in one write, and returns the SASL user name (the
// token identifier, base64) and password (the token password, base64), as Hadoop's client derives
// them.
func requestToken(req []byte) (user, passwd string, err error) {
	if len(req) < 4 {
		return "", "", fmt.Errorf("a DataNode request of %d bytes", len(req))
	}
	op := req[2]
	size, n := protowire.ConsumeVarint(req[3:])
	if n < 0 || uint64(len(req)-3-n) < size {
		return "", "", errors.New("the DataNode request was not written whole")
	}
	msg := req[3+n : 3+n+int(size)]
	var path []protowire.Number
	switch op {
	case opWriteBlock, opReadBlock:
		path = []protowire.Number{1, 1, 2}
	case opBlockChecksum:
		path = []protowire.Number{1, 2}
	default:
		return "", "", fmt.Errorf("DataNode op 0x%x: not one this client protects", op)
	}
	for _, f := range path {
		if msg, err = bytesField(msg, f); err != nil {
			return "", "", err
		}
	}
	ident, err := bytesField(msg, 1)
	if err != nil {
		return "", "", fmt.Errorf("block access token: %w (the cluster needs dfs.block.access.token.enable=true)", err)
	}
	pw, err := bytesField(msg, 2)
	if err != nil {
		return "", "", fmt.Errorf("block access token: %w", err)
	}
	return base64.StdEncoding.EncodeToString(ident), base64.StdEncoding.EncodeToString(pw), nil
}

// bytesField returns the last occurrence of the length-delimited field num of a protobuf message.
func bytesField(msg []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	found := false
	for len(msg) > 0 {
		f, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		msg = msg[n:]
		if f == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			out, found = v, true
			msg = msg[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(f, typ, msg)
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		msg = msg[m:]
	}
	if !found {
		return nil, fmt.Errorf("no field %d", num)
	}
	return out, nil
}

// DataTransferEncryptorMessageProto: status (1, SUCCESS 0, ERROR_UNKNOWN_KEY 1, ERROR 2), payload
// (2), message (3), cipherOption (4, CipherOptionProto: suite 1 with AES_CTR_NOPADDING 2, inKey 2,
// inIv 3, outKey 4, outIv 5), accessTokenError (6).
type saslMessage struct {
	status  uint64
	payload []byte
	message string
	cipher  *cipherOption
}

type cipherOption struct {
	suite                      uint64
	inKey, inIv, outKey, outIv []byte
}

const suiteAESCTR = 2

// delimited is the message with its varint length before it, as Hadoop's writeDelimitedTo sends it.
func (m saslMessage) delimited(offerAES bool) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, m.status)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, m.payload)
	if offerAES {
		var o []byte
		o = protowire.AppendTag(o, 1, protowire.VarintType)
		o = protowire.AppendVarint(o, suiteAESCTR)
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, o)
	}
	return append(protowire.AppendVarint(nil, uint64(len(b))), b...)
}

// maxSASLMessage bounds a handshake message from a DataNode.
const maxSASLMessage = 1 << 16

// readSASLMessage reads one varint-delimited DataTransferEncryptorMessageProto, byte by byte up to
// its end (nothing after it is consumed).
func readSASLMessage(r io.Reader) (saslMessage, error) {
	var m saslMessage
	var lenBuf []byte
	one := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, one); err != nil {
			return m, fmt.Errorf("reading the DataNode's SASL message: %w", err)
		}
		lenBuf = append(lenBuf, one[0])
		if one[0] < 0x80 {
			break
		}
		if len(lenBuf) == binary.MaxVarintLen32 {
			return m, errors.New("the DataNode's SASL message has a bad length")
		}
	}
	size, _ := protowire.ConsumeVarint(lenBuf)
	if size > maxSASLMessage {
		return m, fmt.Errorf("the DataNode's SASL message of %d bytes: more than %d", size, maxSASLMessage)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return m, fmt.Errorf("reading the DataNode's SASL message: %w", err)
	}
	hasStatus := false
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case f == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return m, protowire.ParseError(n)
			}
			m.status, hasStatus, b = v, true, b[n:]
			continue
		case (f == 2 || f == 3 || f == 4) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return m, protowire.ParseError(n)
			}
			b = b[n:]
			switch f {
			case 2:
				m.payload = v
			case 3:
				m.message = string(v)
			case 4:
				if m.cipher != nil {
					continue // the DataNode negotiates one; Hadoop uses the first
				}
				o, err := parseCipherOption(v)
				if err != nil {
					return m, err
				}
				m.cipher = &o
			}
			continue
		}
		n = protowire.ConsumeFieldValue(f, typ, b)
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if !hasStatus {
		return m, errors.New("the DataNode's SASL message has no status")
	}
	return m, nil
}

func parseCipherOption(b []byte) (cipherOption, error) {
	var o cipherOption
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return o, protowire.ParseError(n)
		}
		b = b[n:]
		if f == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return o, protowire.ParseError(n)
			}
			o.suite, b = v, b[n:]
			continue
		}
		if f >= 2 && f <= 5 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return o, protowire.ParseError(n)
			}
			b = b[n:]
			*[]*[]byte{&o.inKey, &o.inIv, &o.outKey, &o.outIv}[f-2] = v
			continue
		}
		n = protowire.ConsumeFieldValue(f, typ, b)
		if n < 0 {
			return o, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return o, nil
}

// expectSuccess turns a DataNode's error status into an error with its message.
func expectSuccess(m saslMessage, step string) error {
	if m.status == 0 {
		return nil
	}
	return fmt.Errorf("the DataNode refused the %s (status %d): %s", step, m.status, m.message)
}

// strongest is the strongest qop both sides allow.
func strongest(offered, allowed []string) string {
	for _, q := range []string{qopConf, qopInt, qopAuth} {
		if slices.Contains(offered, q) && slices.Contains(allowed, q) {
			return q
		}
	}
	return ""
}

// handshake authenticates to the DataNode on raw with the token's SASL name and password (RFC 2831
// in Hadoop's framing: the magic number, then varint-delimited DataTransferEncryptorMessageProtos)
// and returns the connection under the negotiated protection.
func handshake(raw net.Conn, user, passwd string, allowed []string) (net.Conn, error) {
	hello := append(slices.Clone(saslMagic), saslMessage{}.delimited(false)...)
	if _, err := raw.Write(hello); err != nil {
		return nil, err
	}
	m, err := readSASLMessage(raw)
	if err != nil {
		return nil, err
	}
	if err := expectSuccess(m, "SASL start"); err != nil {
		return nil, err
	}
	ch, err := parseChallenge(m.payload)
	if err != nil {
		return nil, err
	}
	qop := strongest(ch.qops, allowed)
	if qop == "" {
		return nil, fmt.Errorf("the DataNode offers protection %v, this client allows %v (dfs.data.transfer.protection in hdfs-site.xml, HADOOP_CONF_DIR)", ch.qops, allowed)
	}
	ciph := ""
	if qop == qopConf {
		if ciph = chooseCipher(ch.ciphers); ciph == "" {
			return nil, fmt.Errorf("the DataNode offers the ciphers %v for privacy and this client has only RC4 (rc4, rc4-56, rc4-40) besides AES: configure AES on the cluster (dfs.encrypt.data.transfer.cipher.suites=AES/CTR/NoPadding)", ch.ciphers)
		}
	}
	cnonce, err := newCnonce()
	if err != nil {
		return nil, err
	}
	d := &digest{user: user, realm: ch.realm, passwd: passwd, nonce: ch.nonce, cnonce: cnonce, qop: qop, uri: "hdfs/0"}
	if _, err := raw.Write(saslMessage{payload: []byte(d.response(ciph))}.delimited(qop == qopConf)); err != nil {
		return nil, err
	}
	m, err = readSASLMessage(raw)
	if err != nil {
		return nil, err
	}
	if err := expectSuccess(m, "SASL response (a block token the DataNode does not accept?)"); err != nil {
		return nil, err
	}
	dirs, err := parseDirectives(string(m.payload))
	if err != nil || len(dirs) == 0 || dirs[0][0] != "rspauth" {
		return nil, fmt.Errorf("the DataNode's SASL answer %q has no rspauth", m.payload)
	}
	if dirs[0][1] != d.value(false) {
		return nil, errors.New("the DataNode's rspauth does not match: it does not know the block token's key")
	}
	if qop == qopAuth {
		return raw, nil
	}
	kic, kis, kcc, kcs := d.keys(ciph)
	out, err := newLayer(kic, kcc, qop == qopConf)
	if err != nil {
		return nil, err
	}
	in, err := newLayer(kis, kcs, qop == qopConf)
	if err != nil {
		return nil, err
	}
	sc := &saslConn{Conn: raw, out: out, in: in, maxOut: max(64, ch.maxbuf-32)}
	if m.cipher == nil {
		return sc, nil
	}
	// AES for the data (privacy): the DataNode sent its keys sealed by the SASL layer, inKey first.
	o := m.cipher
	if o.suite != suiteAESCTR {
		return nil, fmt.Errorf("the DataNode chose the cipher suite %d, not the AES/CTR/NoPadding offered", o.suite)
	}
	inKey, err := in.unwrap(slices.Clone(o.inKey))
	if err != nil {
		return nil, fmt.Errorf("the DataNode's AES key: %w", err)
	}
	outKey, err := in.unwrap(slices.Clone(o.outKey))
	if err != nil {
		return nil, fmt.Errorf("the DataNode's AES key: %w", err)
	}
	return newAESConn(raw, inKey, o.inIv, outKey, o.outIv)
}

// aesConn is the data under AES/CTR once negotiated: the client encrypts with the DataNode's "in" key
// and IV and decrypts with its "out" ones (Hadoop's key names are the DataNode's view).
type aesConn struct {
	net.Conn
	w cipher.StreamWriter
	r cipher.StreamReader
}

func newAESConn(raw net.Conn, inKey, inIv, outKey, outIv []byte) (net.Conn, error) {
	enc, err := aes.NewCipher(inKey)
	if err != nil {
		return nil, fmt.Errorf("the DataNode's AES key: %w", err)
	}
	dec, err := aes.NewCipher(outKey)
	if err != nil {
		return nil, fmt.Errorf("the DataNode's AES key: %w", err)
	}
	if len(inIv) != aes.BlockSize || len(outIv) != aes.BlockSize {
		return nil, fmt.Errorf("the DataNode's AES IVs are %d and %d bytes, want %d", len(inIv), len(outIv), aes.BlockSize)
	}
	return &aesConn{Conn: raw, w: cipher.StreamWriter{S: cipher.NewCTR(enc, inIv), W: raw}, r: cipher.StreamReader{S: cipher.NewCTR(dec, outIv), R: raw}}, nil
}

func (c *aesConn) Write(b []byte) (int, error) { return c.w.Write(b) }
func (c *aesConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
