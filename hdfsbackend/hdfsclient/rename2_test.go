package hdfsclient

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"strings"
	"testing"

	hdfs "github.com/colinmarc/hdfs/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestNamenodeCallOf: the NameNode connection is found on the pinned library's client, and any other
// shape (no field, another type, not connected) is an error naming what is needed, never a guess.
func TestNamenodeCallOf(t *testing.T) {
	type noField struct{ Other int }
	type wrongType struct{ namenode *net.TCPConn }
	_ = wrongType{}.namenode
	for _, tc := range []struct {
		name string
		c    any
		want string
	}{
		{"nil client", (*hdfs.Client)(nil), "non-nil *hdfs.Client"},
		{"not a pointer", hdfs.Client{}, "non-nil *hdfs.Client"},
		{"no field", &noField{}, "has no field namenode"},
		{"wrong type", &wrongType{}, "namenode is a *net.TCPConn"},
		{"not connected", &hdfs.Client{}, "namenode is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call, err := namenodeCallOf(tc.c)
			if err == nil || call != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("namenodeCallOf(%T) = %v, %v; want an error containing %q", tc.c, call != nil, err, tc.want)
			}
		})
	}

	// The library connects at NewClient (simple authentication only writes its handshake): a listener
	// that accepts is enough to get a real client.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}()
	c, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{ln.Addr().String()}, User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if call, err := namenodeCallOf(c); err != nil || call == nil {
		t.Fatalf("the pinned library's client: %v", err)
	}
}

// TestRename2Request: the request is ClientNamenodeProtocol's Rename2RequestProto with
// overwriteDest=false on the wire (field 3 present and 0), sent as method rename2.
func TestRename2Request(t *testing.T) {
	var method string
	var wire []byte
	call := func(m string, req, resp proto.Message) error {
		method = m
		var err error
		if wire, err = proto.Marshal(req); err != nil {
			return err
		}
		return proto.Unmarshal(nil, resp) // the NameNode's empty Rename2ResponseProto
	}
	for _, overwrite := range []bool{false, true} {
		if err := rename2(call, "/a/src", "/b/dst", overwrite); err != nil {
			t.Fatal(err)
		}
		got := wireFields(t, wire)
		want := map[protowire.Number]string{1: "/a/src", 2: "/b/dst", 3: fmt.Sprint(overwrite)}
		if method != "rename2" || !maps.Equal(got, want) {
			t.Errorf("overwrite=%v: sent %s %v; want rename2 %v", overwrite, method, got, want)
		}
	}
	if err := rename2(nil, "/a", "/b", false); err == nil {
		t.Error("rename2 without a connection succeeded")
	}
}

// wireFields decodes a request's string and bool fields by number.
func wireFields(t *testing.T, wire []byte) map[protowire.Number]string {
	t.Helper()
	got := map[protowire.Number]string{}
	for b := wire; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad wire %x", wire)
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeString(b)
			if m < 0 {
				t.Fatalf("bad wire %x", wire)
			}
			got[num], b = v, b[m:]
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				t.Fatalf("bad wire %x", wire)
			}
			got[num], b = fmt.Sprint(protowire.DecodeBool(v)), b[m:]
		default:
			t.Fatalf("field %d of type %v in %x", num, typ, wire)
		}
	}
	return got
}

// TestDeleteRequest: deleteOne sends one delete(src, recursive=false) and reads the NameNode's result:
// true is done, false (no such path) is fs.ErrNotExist, an answer without it an error, never success.
func TestDeleteRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []byte // the DeleteResponseProto on the wire
		want   error  // nil: success; errAny: some error
	}{
		{"deleted", protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), nil},
		{"no such path", protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 0), fs.ErrNotExist},
		{"no result", nil, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var method string
			var wire []byte
			call := func(m string, req, resp proto.Message) error {
				method = m
				var err error
				if wire, err = proto.Marshal(req); err != nil {
					return err
				}
				return proto.UnmarshalOptions{AllowPartial: true}.Unmarshal(tc.answer, resp)
			}
			err := deleteOne(call, "/a/f")
			switch {
			case tc.want == nil && err != nil, tc.want == errAny && err == nil, tc.want != nil && tc.want != errAny && !errors.Is(err, tc.want):
				t.Fatalf("deleteOne: %v, want %v", err, tc.want)
			}
			if got, want := wireFields(t, wire), map[protowire.Number]string{1: "/a/f", 2: "false"}; method != "delete" || !maps.Equal(got, want) {
				t.Errorf("sent %s %v; want delete %v", method, got, want)
			}
		})
	}
	if err := deleteOne(nil, "/a"); err == nil {
		t.Error("delete without a connection succeeded")
	}
}

var errAny = errors.New("any error")
