package flinkmeta

import "encoding/binary"

// The V4+ properties trailer is one Java Object Serialization stream (§7). This file holds a small,
// strict reader for the subset of the grammar Flink's CheckpointProperties uses, and the writer.

const (
	tcNull         = 0x70
	tcReference    = 0x71
	tcClassDesc    = 0x72
	tcObject       = 0x73
	tcString       = 0x74
	tcEndBlock     = 0x78
	tcLongString   = 0x7C
	tcEnum         = 0x7E
	baseHandle     = 0x7E0000
	scSerializable = 0x02
	scEnum         = 0x10
	scWriteMethod  = 0x01

	classProperties     = "org.apache.flink.runtime.checkpoint.CheckpointProperties"
	classCheckpointType = "org.apache.flink.runtime.checkpoint.CheckpointType"
	classSavepointType  = "org.apache.flink.runtime.checkpoint.SavepointType"
	classSharing        = "org.apache.flink.runtime.checkpoint.SnapshotType$SharingFilesStrategy"
	classFormatType     = "org.apache.flink.core.execution.SavepointFormatType"
	classPostAction     = "org.apache.flink.runtime.checkpoint.SavepointType$PostCheckpointAction"
	classEnum           = "java.lang.Enum"

	propertiesUID int64 = 2
	// DefaultCheckpointTypeUID / DefaultSavepointTypeUID are the serialVersionUIDs Java computed for
	// Flink 1.16+ (as seen in real files); builders use them.
	DefaultCheckpointTypeUID = int64(-0x2921B0FCFA51E2C6) // 0xD6DE4F0305AE1D3A
	DefaultSavepointTypeUID  = int64(-0x5F782CF75BA7EB48) // 0xA087D308A45814B8
)

// ---- reader ----

type jclass struct {
	name   string
	uid    int64
	flags  uint8
	fields []jfield
	super  *jclass
}

type jfield struct {
	typ  byte
	name string
}

type jkind uint8

const (
	jNull jkind = iota
	jString
	jEnum
	jObject
	jClassRef
)

type jvalue struct {
	kind   jkind
	str    string  // string value or enum constant name
	class  *jclass // enum / object class
	values map[string]jvalue
	prims  map[string]int64
}

type javaReader struct {
	c       *cursor
	handles []any // *jclass or jvalue
	depth   int
}

func (j *javaReader) newHandle(v any) int {
	j.handles = append(j.handles, v)
	return len(j.handles) - 1
}

func (j *javaReader) ref() any {
	h := j.c.i32()
	idx := int64(h) - baseHandle
	if j.c.err != nil {
		return nil
	}
	if idx < 0 || idx >= int64(len(j.handles)) {
		j.c.failf("Java serialization back-reference to a known handle (got 0x%x)", uint32(h))
		return nil
	}
	return j.handles[idx]
}

func (j *javaReader) javaString() string {
	n := int(j.c.u16())
	return j.c.mutf8Body(n)
}

// content reads one Content item (§7).
func (j *javaReader) content() jvalue {
	j.depth++
	defer func() { j.depth-- }()
	if j.depth > 16 {
		j.c.failf("Java serialization nested at most 16 deep")
		return jvalue{}
	}
	tc := j.c.u8()
	if j.c.err != nil {
		return jvalue{}
	}
	switch tc {
	case tcNull:
		return jvalue{kind: jNull}
	case tcReference:
		return j.backReference()
	case tcString:
		h := j.newHandle(nil)
		v := jvalue{kind: jString, str: j.javaString()}
		j.handles[h] = v
		return v
	case tcLongString:
		return j.longString()
	case tcEnum:
		return j.enumConstant()
	case tcObject:
		return j.object()
	}
	j.c.back(1)
	j.c.failf("Java serialization content tag (null, reference, string, enum or object; got 0x%02x)", tc)
	return jvalue{}
}

// backReference reads a back-reference to an item read before; one to an item still being read (its
// handle is assigned, its value not yet) fails the parse.
func (j *javaReader) backReference() jvalue {
	switch v := j.ref().(type) {
	case jvalue:
		return v
	case *jclass:
		return jvalue{kind: jClassRef, class: v}
	}
	if j.c.err == nil {
		j.c.back(4)
		j.c.failf("Java back-reference to a completely read item")
	}
	return jvalue{}
}

// longString reads a long string, its length bounded by what is left of the file.
func (j *javaReader) longString() jvalue {
	h := j.newHandle(nil)
	n := j.c.i64()
	if n < 0 || n > j.c.remaining() {
		j.c.failf("Java long string length within the remaining %d bytes (got %d)", j.c.remaining(), n)
		return jvalue{}
	}
	v := jvalue{kind: jString, str: j.c.mutf8Body(int(n))}
	j.handles[h] = v
	return v
}

// enumConstant reads an enum constant: an enum class descriptor, then the constant's name.
func (j *javaReader) enumConstant() jvalue {
	cl := j.classDesc()
	h := j.newHandle(nil)
	name := j.content()
	if j.c.err != nil {
		return jvalue{}
	}
	if cl == nil || cl.flags&scEnum == 0 || name.kind != jString {
		j.c.failf("Java enum with an enum class descriptor and a constant name")
		return jvalue{}
	}
	v := jvalue{kind: jEnum, class: cl, str: name.str}
	j.handles[h] = v
	return v
}

// object reads an object's class descriptor and its fields, superclass first. Only classes
// serialized in default field order are read; the object's handle is assigned before its fields,
// so that they may refer back to it.
func (j *javaReader) object() jvalue {
	cl := j.classDesc()
	if j.c.err != nil {
		return jvalue{}
	}
	if cl == nil {
		j.c.failf("Java object with a class descriptor")
		return jvalue{}
	}
	h := j.newHandle(nil)
	v := jvalue{kind: jObject, class: cl, values: map[string]jvalue{}, prims: map[string]int64{}}
	j.handles[h] = v
	var chain []*jclass
	for k := cl; k != nil; k = k.super {
		chain = append(chain, k)
		if len(chain) > 16 {
			j.c.failf("Java class hierarchy at most 16 deep")
			return jvalue{}
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		if !j.classFields(chain[i], v) {
			return jvalue{}
		}
	}
	return v
}

// classFields reads the fields class k declares into v (its maps), in the descriptor's order; false
// when the class is not serialized in default field order or a field could not be read.
func (j *javaReader) classFields(k *jclass, v jvalue) bool {
	if k.flags&scWriteMethod != 0 || k.flags&scSerializable == 0 {
		j.c.failf("Java class %s serialized by default field order (flags 0x%02x unsupported)", k.name, k.flags)
		return false
	}
	for _, f := range k.fields {
		switch f.typ {
		case 'Z', 'B':
			v.prims[f.name] = int64(j.c.u8())
		case 'C', 'S':
			v.prims[f.name] = int64(j.c.u16())
		case 'I', 'F':
			v.prims[f.name] = int64(j.c.i32())
		case 'J', 'D':
			v.prims[f.name] = j.c.i64()
		case 'L', '[':
			v.values[f.name] = j.content()
		}
		if j.c.err != nil {
			return false
		}
	}
	return true
}

func (j *javaReader) classDesc() *jclass {
	tc := j.c.u8()
	if j.c.err != nil {
		return nil
	}
	switch tc {
	case tcNull:
		return nil
	case tcReference:
		cl, ok := j.ref().(*jclass)
		if !ok && j.c.err == nil {
			j.c.back(4)
			j.c.failf("Java back-reference to a class descriptor")
		}
		return cl
	case tcClassDesc:
	default:
		j.c.back(1)
		j.c.failf("Java class descriptor tag (got 0x%02x)", tc)
		return nil
	}
	cl := &jclass{}
	cl.name = j.javaString()
	cl.uid = j.c.i64()
	j.newHandle(cl)
	cl.flags = j.c.u8()
	n := int(int16(j.c.u16()))
	if j.c.err != nil {
		return nil
	}
	if n < 0 || int64(n)*3 > j.c.remaining() {
		j.c.failf("Java field count within the remaining bytes (got %d)", n)
		return nil
	}
	for i := 0; i < n && j.c.err == nil; i++ {
		f := jfield{typ: j.c.u8()}
		f.name = j.javaString()
		switch f.typ {
		case 'Z', 'B', 'C', 'S', 'I', 'F', 'J', 'D':
		case 'L', '[':
			if sig := j.content(); j.c.err == nil && sig.kind != jString {
				j.c.failf("Java field type signature string")
			}
		default:
			j.c.failf("Java field type code (got 0x%02x)", f.typ)
		}
		cl.fields = append(cl.fields, f)
	}
	if t := j.c.u8(); j.c.err == nil && t != tcEndBlock {
		j.c.back(1)
		j.c.failf("end of class annotation 0x78 (got 0x%02x)", t)
		return nil
	}
	cl.super = j.classDesc()
	if j.c.err != nil {
		return nil
	}
	return cl
}

// readProperties walks the trailer strictly and extracts the CheckpointProperties.
func readProperties(c *cursor) *Properties {
	start := c.pos()
	if c.u16() != 0xACED || c.u16() != 0x0005 {
		if c.err == nil {
			c.seekFail(start, "Java serialization header AC ED 00 05 of the properties trailer")
		}
		return nil
	}
	j := &javaReader{c: c}
	v := j.content()
	if c.err != nil {
		return nil
	}
	if v.kind == jNull {
		return &Properties{Null: true}
	}
	bad := func(what string) *Properties {
		c.seekFail(start, "CheckpointProperties trailer: "+what)
		return nil
	}
	if v.kind != jObject || v.class.name != classProperties {
		return bad("a CheckpointProperties object or null")
	}
	p := &Properties{}
	for _, f := range []struct {
		name string
		dst  *bool
	}{
		{"discardCancelled", &p.DiscardCancelled}, {"discardFailed", &p.DiscardFailed},
		{"discardFinished", &p.DiscardFinished}, {"discardSubsumed", &p.DiscardSubsumed},
		{"discardSuspended", &p.DiscardSuspended}, {"forced", &p.Forced}, {"unclaimed", &p.Unclaimed},
	} {
		x, ok := v.prims[f.name]
		if !ok {
			return bad("boolean field " + f.name)
		}
		*f.dst = x != 0
	}
	t, ok := v.values["checkpointType"]
	if !ok || t.kind != jObject {
		return bad("checkpointType object")
	}
	p.TypeSerialVersionUID = t.class.uid
	enumField := func(name, class string) (string, bool) {
		e, ok := t.values[name]
		if !ok || e.kind != jEnum || e.class.name != class {
			return "", false
		}
		return e.str, true
	}
	name, ok := t.values["name"]
	if !ok || name.kind != jString {
		return bad("snapshot type name string")
	}
	p.TypeName = name.str
	switch t.class.name {
	case classCheckpointType:
		if p.SharingStrategy, ok = enumField("sharingFilesStrategy", classSharing); !ok {
			return bad("CheckpointType.sharingFilesStrategy enum")
		}
	case classSavepointType:
		p.Savepoint = true
		if p.FormatType, ok = enumField("formatType", classFormatType); !ok {
			return bad("SavepointType.formatType enum")
		}
		if p.PostCheckpointAction, ok = enumField("postCheckpointAction", classPostAction); !ok {
			return bad("SavepointType.postCheckpointAction enum")
		}
	default:
		return bad("checkpointType of class CheckpointType or SavepointType")
	}
	return p
}

// ---- writer ----

type javaWriter struct {
	b       []byte
	handles int
	classes map[string]int // class name → handle (Java shares descriptors)
	sigs    map[string]int // field type signatures (interned by Java, hence shared)
}

func (w *javaWriter) newHandle() int { w.handles++; return w.handles - 1 }

func (w *javaWriter) utf(s string) {
	w.b = binary.BigEndian.AppendUint16(w.b, uint16(mutf8Len(s)))
	w.b = appendMUTF8(w.b, s)
}

func (w *javaWriter) ref(h int) {
	w.b = append(w.b, tcReference)
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(baseHandle+h))
}

func (w *javaWriter) str(s string) {
	w.b = append(w.b, tcString)
	w.newHandle()
	w.utf(s)
}

type wfield struct {
	typ       byte
	name, sig string
}

// classDesc writes a descriptor (or a back-reference to it) and its superclass chain.
func (w *javaWriter) classDesc(name string, uid int64, flags uint8, fields []wfield, super func()) {
	if h, ok := w.classes[name]; ok {
		w.ref(h)
		return
	}
	w.b = append(w.b, tcClassDesc)
	w.utf(name)
	w.b = binary.BigEndian.AppendUint64(w.b, uint64(uid))
	w.classes[name] = w.newHandle()
	w.b = append(w.b, flags)
	w.b = binary.BigEndian.AppendUint16(w.b, uint16(len(fields)))
	for _, f := range fields {
		w.b = append(w.b, f.typ)
		w.utf(f.name)
		if f.typ == 'L' {
			if h, ok := w.sigs[f.sig]; ok {
				w.ref(h)
			} else {
				w.sigs[f.sig] = w.handles
				w.str(f.sig)
			}
		}
	}
	w.b = append(w.b, tcEndBlock)
	if super == nil {
		w.b = append(w.b, tcNull)
	} else {
		super()
	}
}

func (w *javaWriter) enum(class, constant string) {
	w.b = append(w.b, tcEnum)
	w.classDesc(class, 0, scSerializable|scEnum, nil, func() {
		w.classDesc(classEnum, 0, scSerializable|scEnum, nil, nil)
	})
	w.newHandle()
	w.str(constant)
}

func javaSig(class string) string {
	b := []byte("L" + class + ";")
	for i := range b {
		if b[i] == '.' {
			b[i] = '/'
		}
	}
	return string(b)
}

// appendProperties appends the trailer for p (the caller guarantees p != nil).
func appendProperties(dst []byte, p *Properties) []byte {
	w := &javaWriter{b: append(dst, 0xAC, 0xED, 0x00, 0x05), classes: map[string]int{}, sigs: map[string]int{}}
	if p.Null {
		return append(w.b, tcNull)
	}
	w.b = append(w.b, tcObject)
	w.classDesc(classProperties, propertiesUID, scSerializable, []wfield{
		{'Z', "discardCancelled", ""}, {'Z', "discardFailed", ""}, {'Z', "discardFinished", ""},
		{'Z', "discardSubsumed", ""}, {'Z', "discardSuspended", ""}, {'Z', "forced", ""},
		{'Z', "unclaimed", ""}, {'L', "checkpointType", javaSig("org.apache.flink.runtime.checkpoint.SnapshotType")},
	}, nil)
	w.newHandle()
	for _, x := range []bool{p.DiscardCancelled, p.DiscardFailed, p.DiscardFinished, p.DiscardSubsumed, p.DiscardSuspended, p.Forced, p.Unclaimed} {
		if x {
			w.b = append(w.b, 1)
		} else {
			w.b = append(w.b, 0)
		}
	}
	w.b = append(w.b, tcObject)
	if p.Savepoint {
		w.classDesc(classSavepointType, p.TypeSerialVersionUID, scSerializable, []wfield{
			{'L', "formatType", javaSig(classFormatType)},
			{'L', "name", "Ljava/lang/String;"},
			{'L', "postCheckpointAction", javaSig(classPostAction)},
		}, nil)
		w.newHandle()
		w.enum(classFormatType, p.FormatType)
		w.str(p.TypeName)
		w.enum(classPostAction, p.PostCheckpointAction)
	} else {
		w.classDesc(classCheckpointType, p.TypeSerialVersionUID, scSerializable, []wfield{
			{'L', "name", "Ljava/lang/String;"},
			{'L', "sharingFilesStrategy", javaSig(classSharing)},
		}, nil)
		w.newHandle()
		w.str(p.TypeName)
		w.enum(classSharing, p.SharingStrategy)
	}
	return w.b
}

// kindOf derives Metadata.Kind and SavepointFormat from a trailer.
func kindOf(p *Properties) (kind, format string) {
	switch {
	case p == nil || p.Null:
		return "unknown", ""
	case p.Savepoint:
		switch p.FormatType {
		case "CANONICAL":
			return "savepoint", "canonical"
		case "NATIVE":
			return "savepoint", "native"
		}
		return "savepoint", ""
	}
	return "checkpoint", ""
}
