package hdfsclient

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// namenodeCall sends one ClientProtocol call (method name, request, response) on the library's NameNode
// connection, with its failover, SASL and Kerberos: the way to make a call the library does not offer.
type namenodeCall func(method string, req, resp proto.Message) error

// libraryShape names what ckguard relies on inside the pinned library, for the error that stops the
// mount when a different library version no longer has it.
const libraryShape = "github.com/colinmarc/hdfs/v2 v2.4.0's Client.namenode (*rpc.NamenodeConnection) with Execute(string, proto.Message, proto.Message) error"

// namenodeCallOf reaches the unexported NameNode connection of a library client (c is a *hdfs.Client)
// and returns its Execute. It fails, rather than guessing, when the field is missing, of another type,
// nil, or its Execute has another signature: the mount then refuses to start, since without it a rename
// could replace its target.
func namenodeCallOf(c any) (namenodeCall, error) {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("HDFS client library: want a non-nil *hdfs.Client, got %T (ckguard needs %s)", c, libraryShape)
	}
	f := v.Elem().FieldByName("namenode")
	if !f.IsValid() {
		return nil, fmt.Errorf("HDFS client library: %T has no field namenode (ckguard needs %s; rebuild with the pinned version)", c, libraryShape)
	}
	if t := f.Type(); t.Kind() != reflect.Pointer || t.Elem().Name() != "NamenodeConnection" || !strings.HasSuffix(t.Elem().PkgPath(), "/hdfs/v2/internal/rpc") {
		return nil, fmt.Errorf("HDFS client library: %T.namenode is a %s (ckguard needs %s; rebuild with the pinned version)", c, f.Type(), libraryShape)
	}
	// The field is unexported: reflect hands out a read-only Value, whose methods cannot be called.
	// The pointer is read once here, never written.
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	if f.IsNil() {
		return nil, fmt.Errorf("HDFS client library: %T.namenode is nil (not connected)", c)
	}
	m := f.MethodByName("Execute")
	if !m.IsValid() {
		return nil, fmt.Errorf("HDFS client library: %s has no method Execute (ckguard needs %s; rebuild with the pinned version)", f.Type(), libraryShape)
	}
	call, ok := m.Interface().(func(string, proto.Message, proto.Message) error)
	if !ok {
		return nil, fmt.Errorf("HDFS client library: %s.Execute is a %s (ckguard needs %s; rebuild with the pinned version)", f.Type(), m.Type(), libraryShape)
	}
	return call, nil
}

// namenodeMessages are the ClientNamenodeProtocol requests and responses ckguard sends itself (rename2,
// delete), described here (proto2, package hadoop.hdfs, the field numbers of Hadoop's
// ClientNamenodeProtocol.proto) and built with dynamicpb, so the calls need nothing internal to the
// library but the connection. The descriptors live in their own registry: nothing is registered
// globally, so they never clash with the library's.
var namenodeMessages = sync.OnceValues(func() (map[string]protoreflect.MessageDescriptor, error) {
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, label descriptorpb.FieldDescriptorProto_Label) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(), Label: label.Enum()}
	}
	const (
		str, boolean = descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_BOOL
		must, maybe  = descriptorpb.FieldDescriptorProto_LABEL_REQUIRED, descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	)
	msgs := []*descriptorpb.DescriptorProto{
		{Name: proto.String("Rename2RequestProto"), Field: []*descriptorpb.FieldDescriptorProto{
			field("src", 1, str, must),
			field("dst", 2, str, must),
			field("overwriteDest", 3, boolean, must),
			field("moveToTrash", 4, boolean, maybe),
		}},
		{Name: proto.String("Rename2ResponseProto")},
		{Name: proto.String("DeleteRequestProto"), Field: []*descriptorpb.FieldDescriptorProto{
			field("src", 1, str, must),
			field("recursive", 2, boolean, must),
		}},
		{Name: proto.String("DeleteResponseProto"), Field: []*descriptorpb.FieldDescriptorProto{
			field("result", 1, boolean, must),
		}},
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:        proto.String("ckguard/hdfsclient/namenode.proto"),
		Package:     proto.String("hadoop.hdfs"),
		Syntax:      proto.String("proto2"),
		MessageType: msgs,
	}, new(protoregistry.Files))
	if err != nil {
		return nil, fmt.Errorf("HDFS NameNode message descriptors: %w", err)
	}
	out := map[string]protoreflect.MessageDescriptor{}
	for _, m := range msgs {
		out[m.GetName()] = fd.Messages().ByName(protoreflect.Name(m.GetName()))
	}
	return out, nil
})

// newMessage returns an empty message of one of namenodeMessages, its fields set from vals by name.
func newMessage(name string, vals map[string]protoreflect.Value) (*dynamicpb.Message, error) {
	ds, err := namenodeMessages()
	if err != nil {
		return nil, err
	}
	d, ok := ds[name]
	if !ok {
		return nil, fmt.Errorf("HDFS NameNode message %s is not described", name)
	}
	m := dynamicpb.NewMessage(d)
	for k, v := range vals {
		f := d.Fields().ByName(protoreflect.Name(k))
		if f == nil {
			return nil, fmt.Errorf("HDFS NameNode message %s has no field %s", name, k)
		}
		m.Set(f, v)
	}
	return m, nil
}

// rename2 sends ClientProtocol.rename2(src, dst, overwrite). With overwrite false the NameNode itself
// refuses an existing dst (FileAlreadyExistsException, classified fs.ErrExist) in the same namespace
// operation as the move: no target created by anyone at any moment is replaced.
func rename2(call namenodeCall, src, dst string, overwrite bool) error {
	req, err := newMessage("Rename2RequestProto", map[string]protoreflect.Value{
		"src": protoreflect.ValueOfString(src), "dst": protoreflect.ValueOfString(dst), "overwriteDest": protoreflect.ValueOfBool(overwrite)})
	if err != nil {
		return err
	}
	resp, err := newMessage("Rename2ResponseProto", nil)
	if err != nil {
		return err
	}
	if call == nil {
		return errors.New("HDFS rename2: no NameNode connection")
	}
	return call("rename2", req, resp)
}

// deleteOne sends ClientProtocol.delete(src, recursive=false): one RPC, where the library's Remove
// first asks getFileInfo (two per deleted file, half the speed of `rm -rf` through the mount). The
// NameNode refuses a non-empty directory (PathIsNotEmptyDirectoryException: ENOTEMPTY) and answers
// false for a path that does not exist (fs.ErrNotExist): never a recursive delete.
func deleteOne(call namenodeCall, src string) error {
	req, err := newMessage("DeleteRequestProto", map[string]protoreflect.Value{
		"src": protoreflect.ValueOfString(src), "recursive": protoreflect.ValueOfBool(false)})
	if err != nil {
		return err
	}
	resp, err := newMessage("DeleteResponseProto", nil)
	if err != nil {
		return err
	}
	if call == nil {
		return errors.New("HDFS delete: no NameNode connection")
	}
	if err := call("delete", req, resp); err != nil {
		return err
	}
	f := resp.Descriptor().Fields().ByName("result")
	if !resp.Has(f) {
		return errors.New("HDFS delete: the NameNode's answer has no result")
	}
	if !resp.Get(f).Bool() {
		return fs.ErrNotExist
	}
	return nil
}
