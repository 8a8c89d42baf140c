package dtsasl

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/rc4"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
)

// maxFrame bounds one SASL message from a DataNode (its length is read from the wire before it is
// allocated); Hadoop's are a packet (64 KiB of data and its checksums) at most.
const maxFrame = 16 << 20

// layer is one direction's DIGEST-MD5 security layer (RFC 2831 2.3, 2.4): the HMAC key, the sequence
// number and, for auth-conf, the RC4 stream.
type layer struct {
	mac hash.Hash
	seq uint32
	rc4 *rc4.Cipher // nil: integrity only
}

func newLayer(ki, kc []byte, conf bool) (*layer, error) {
	l := &layer{mac: hmac.New(md5.New, ki)}
	if conf {
		c, err := rc4.NewCipher(kc)
		if err != nil {
			return nil, err
		}
		l.rc4 = c
	}
	return l, nil
}

func (l *layer) sum(msg []byte) []byte {
	var seq [4]byte
	binary.BigEndian.PutUint32(seq[:], l.seq)
	l.mac.Reset()
	l.mac.Write(seq[:])
	l.mac.Write(msg)
	return l.mac.Sum(nil)[:10]
}

// wrap seals msg: {msg, HMAC(Ki, {seq, msg})[0..9]} (RC4-encrypted for auth-conf), 0x0001, seq.
func (l *layer) wrap(msg []byte) []byte {
	out := make([]byte, 0, len(msg)+16)
	out = append(out, msg...)
	out = append(out, l.sum(msg)...)
	if l.rc4 != nil {
		l.rc4.XORKeyStream(out, out)
	}
	out = append(out, 0, 1)
	out = binary.BigEndian.AppendUint32(out, l.seq)
	l.seq++
	return out
}

// unwrap opens one sealed message in place and returns its payload, or an error when its HMAC, message
// type or sequence number is not the next one expected (the layer is then unusable: callers drop the
// connection).
func (l *layer) unwrap(b []byte) ([]byte, error) {
	if len(b) < 16 {
		return nil, fmt.Errorf("SASL message of %d bytes: shorter than its trailer", len(b))
	}
	body, trailer := b[:len(b)-6], b[len(b)-6:]
	if trailer[0] != 0 || trailer[1] != 1 {
		return nil, errors.New("SASL message with an unknown message type")
	}
	if seq := binary.BigEndian.Uint32(trailer[2:]); seq != l.seq {
		return nil, fmt.Errorf("SASL message with sequence number %d, want %d", seq, l.seq)
	}
	if l.rc4 != nil {
		l.rc4.XORKeyStream(body, body)
	}
	msg, mac := body[:len(body)-10], body[len(body)-10:]
	if !hmac.Equal(mac, l.sum(msg)) {
		return nil, errors.New("SASL message whose HMAC does not match: altered, or keys not agreed")
	}
	l.seq++
	return msg, nil
}

// saslConn is a connection under a DIGEST-MD5 security layer: every Write is sent as sealed messages
// of at most maxOut bytes, each prefixed with its length; Read returns the verified payload of the
// messages received, in order. Reads and writes may run concurrently (they share no state).
type saslConn struct {
	net.Conn
	out, in *layer
	maxOut  int
	pending []byte // what is left of the last message read
	hdr     [4]byte
}

func (c *saslConn) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(len(b), c.maxOut)
		sealed := c.out.wrap(b[:n])
		frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(sealed)), uint32(len(sealed)))
		if _, err := c.Conn.Write(append(frame, sealed...)); err != nil {
			return written, err
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

// Read returns what is left of the current message; only when nothing is left does it read (and
// verify) the next one, so a read never waits for a message the peer has no reason to send yet.
func (c *saslConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for len(c.pending) == 0 {
		msg, err := c.readMessage()
		if err != nil {
			return 0, err
		}
		c.pending = msg
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *saslConn) readMessage() ([]byte, error) {
	if _, err := io.ReadFull(c.Conn, c.hdr[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(c.hdr[:])
	if size > maxFrame {
		return nil, fmt.Errorf("SASL message of %d bytes from the DataNode: more than %d", size, maxFrame)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c.Conn, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return c.in.unwrap(body)
}
