// read.go parses GGUF bytes (a mapping or an in-memory buffer) into a File,
// validating every count, length and offset against the bytes that exist. It
// is not a streaming reader: the whole file must be addressable.

package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/fileio"
)

// maxArrayDepth bounds nesting of arrays of arrays (the format has no limit;
// real files use one level at most).
const maxArrayDepth = 16

// Open maps the GGUF file at path read-only and parses it. Tensor data stays
// in the mapping (no copy); call Close when done.
func Open(path string) (*File, error) {
	data, err := fileio.Map(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Parse(path, data)
	if err != nil {
		fileio.Unmap(data)
		return nil, err
	}
	f.mapping = data
	return f, nil
}

// Parse parses a GGUF file held in data; name is used in errors and as
// File.Path. Tensor Data slices alias data.
func Parse(name string, data []byte) (*File, error) {
	d := &decoder{name: name, b: data}
	f := &File{Path: name, kv: map[string]int{}, tensors: map[string]int{}}

	if len(data) < 4 {
		return nil, d.errf("file is %d bytes; too short for a GGUF header", len(data))
	}
	if string(data[:4]) != Magic {
		return nil, d.errf("bad magic %q; not a GGUF file", data[:4])
	}
	d.off = 4
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case bits.ReverseBytes32(version) == 2 || bits.ReverseBytes32(version) == 3:
		return nil, d.errf("big-endian GGUF (version %d byte-swapped) is not supported", bits.ReverseBytes32(version))
	default:
		return nil, d.errf("unsupported GGUF version %d (want 2 or 3)", version)
	}
	f.Version = version
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Smallest encodings: a KV is a key length, a type and one byte; a tensor
	// info is a name length, n_dims, type and offset.
	if err := d.fits(nKV, 8+4+1, "metadata entries"); err != nil {
		return nil, err
	}
	if err := d.fits(nTensors, 8+4+4+8, "tensor infos"); err != nil {
		return nil, err
	}

	f.KV = make([]KV, 0, nKV)
	for i := range nKV {
		start := d.off
		key, err := d.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, d.errAt(start, "metadata key %d is empty", i)
		}
		if _, dup := f.kv[key]; dup {
			return nil, d.errAt(start, "duplicate metadata key %q", key)
		}
		t, err := d.u32(fmt.Sprintf("type of metadata key %q", key))
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(t), key, 0)
		if err != nil {
			return nil, err
		}
		f.kv[key] = len(f.KV)
		f.KV = append(f.KV, KV{key, v})
	}

	f.Alignment = DefaultAlignment
	if v, ok := f.Value(AlignmentKey); ok {
		a, big, isInt := asInt(v)
		if !isInt || big != 0 || a <= 0 || a&(a-1) != 0 {
			return nil, d.errAt(0, "%s is %v (%T); want a power of two", AlignmentKey, v, v)
		}
		f.Alignment = uint64(a)
	}

	f.Tensors = make([]TensorInfo, 0, nTensors)
	for i := range nTensors {
		start := d.off
		ti, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tensors[ti.Name]; dup {
			return nil, d.errAt(start, "duplicate tensor name %q", ti.Name)
		}
		if ti.Offset%f.Alignment != 0 {
			return nil, d.errAt(start, "tensor %q offset %d is not a multiple of the alignment %d", ti.Name, ti.Offset, f.Alignment)
		}
		f.tensors[ti.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}

	headerEnd := uint64(d.off)
	f.DataOffset = headerEnd + (f.Alignment-headerEnd%f.Alignment)%f.Alignment
	if err := f.bindData(d); err != nil {
		return nil, err
	}
	return f, nil
}

// bindData checks that every tensor lies inside the file without overlapping
// another, and points its Data into the bytes.
func (f *File) bindData(d *decoder) error {
	size := uint64(len(d.b))
	type span struct{ start, end uint64 }
	spans := make([]span, len(f.Tensors))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		n, err := tensorBytes(t.Type, t.Shape)
		if err != nil {
			return d.errAt(int(min(f.DataOffset, size)), "tensor %q: %v", t.Name, err)
		}
		start := f.DataOffset + t.Offset
		end := start + n
		if start < f.DataOffset || end < start || end > size {
			return d.errAt(int(min(f.DataOffset, size)), "tensor %q data [%d, %d) (offset %d + data section at %d) lies outside the %d-byte file",
				t.Name, start, f.DataOffset+t.Offset+n, t.Offset, f.DataOffset, size)
		}
		t.Data = d.b[start:end:end]
		spans[i] = span{start, end}
	}
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmpU64(spans[a].start, spans[b].start); c != 0 {
			return c
		}
		return cmpU64(spans[a].end, spans[b].end)
	})
	for k := 1; k < len(order); k++ {
		p, q := spans[order[k-1]], spans[order[k]]
		if q.start < p.end && q.start < q.end {
			return d.errAt(int(q.start), "tensor %q data [%d, %d) overlaps tensor %q [%d, %d)",
				f.Tensors[order[k]].Name, q.start, q.end, f.Tensors[order[k-1]].Name, p.start, p.end)
		}
	}
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type decoder struct {
	name string
	b    []byte
	off  int
}

func (d *decoder) errAt(off int, format string, args ...any) error {
	return &FormatError{Path: d.name, Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) errf(format string, args ...any) error {
	return d.errAt(d.off, format, args...)
}

func (d *decoder) remaining() uint64 { return uint64(len(d.b) - d.off) }

// take returns the next n bytes, or a truncation error naming what.
func (d *decoder) take(n uint64, what string) ([]byte, error) {
	if n > d.remaining() {
		return nil, d.errf("truncated: %s needs %d bytes, only %d remain", what, n, d.remaining())
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p, nil
}

// fits checks that count items of at least size bytes each can fit in the
// rest of the file, so that counts never drive huge allocations.
func (d *decoder) fits(count, size uint64, what string) error {
	if count > d.remaining()/size {
		return d.errf("%d %s cannot fit in the %d bytes that remain", count, what, d.remaining())
	}
	return nil
}

func (d *decoder) u32(what string) (uint32, error) {
	p, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	p, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

func (d *decoder) str(what string) (string, error) {
	start := d.off
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > d.remaining() {
		return "", d.errAt(start, "%s: string length %d runs past the end of the file (%d bytes remain)", what, n, d.remaining())
	}
	p, _ := d.take(n, what)
	return string(p), nil
}

func (d *decoder) value(t ValueType, key string, depth int) (any, error) {
	what := fmt.Sprintf("value of %q", key)
	switch t {
	case TypeUint8, TypeInt8, TypeBool, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeFloat32, TypeUint64, TypeInt64, TypeFloat64:
		p, err := d.take(t.minSize(), what)
		if err != nil {
			return nil, err
		}
		return scalar(t, p), nil
	case TypeString:
		return d.str(what)
	case TypeArray:
		start := d.off
		if depth >= maxArrayDepth {
			return nil, d.errf("%s: arrays nested deeper than %d", what, maxArrayDepth)
		}
		et, err := d.u32(what + " element type")
		if err != nil {
			return nil, err
		}
		n, err := d.u64(what + " element count")
		if err != nil {
			return nil, err
		}
		if ValueType(et).minSize() == 0 {
			return nil, d.errAt(start, "%s: unknown array element type %d", what, et)
		}
		if err := d.fits(n, ValueType(et).minSize(), fmt.Sprintf("%v elements of %q", ValueType(et), key)); err != nil {
			return nil, err
		}
		return d.array(ValueType(et), n, key, depth+1)
	}
	return nil, d.errf("%s: unknown value type %d", what, uint32(t))
}

func scalar(t ValueType, p []byte) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return p[0]
	case TypeInt8:
		return int8(p[0])
	case TypeBool:
		return p[0] != 0
	case TypeUint16:
		return le.Uint16(p)
	case TypeInt16:
		return int16(le.Uint16(p))
	case TypeUint32:
		return le.Uint32(p)
	case TypeInt32:
		return int32(le.Uint32(p))
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(p))
	case TypeUint64:
		return le.Uint64(p)
	case TypeInt64:
		return int64(le.Uint64(p))
	case TypeFloat64:
		return math.Float64frombits(le.Uint64(p))
	}
	panic("unreachable")
}

// array decodes n elements of type t; the caller has checked that they fit.
func (d *decoder) array(t ValueType, n uint64, key string, depth int) (any, error) {
	what := fmt.Sprintf("array %q", key)
	switch t {
	case TypeString:
		out := make([]string, n)
		for i := range out {
			s, err := d.str(fmt.Sprintf("%s element %d", what, i))
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case TypeArray:
		out := make([]any, n)
		for i := range out {
			v, err := d.value(TypeArray, key, depth)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	p, _ := d.take(n*t.minSize(), what) // fits was checked
	switch t {
	case TypeUint8:
		return slices.Clone(p), nil
	case TypeInt8:
		return decodeNums(p, 1, func(q []byte) int8 { return int8(q[0]) }), nil
	case TypeBool:
		return decodeNums(p, 1, func(q []byte) bool { return q[0] != 0 }), nil
	case TypeUint16:
		return decodeNums(p, 2, binary.LittleEndian.Uint16), nil
	case TypeInt16:
		return decodeNums(p, 2, func(q []byte) int16 { return int16(binary.LittleEndian.Uint16(q)) }), nil
	case TypeUint32:
		return decodeNums(p, 4, binary.LittleEndian.Uint32), nil
	case TypeInt32:
		return decodeNums(p, 4, func(q []byte) int32 { return int32(binary.LittleEndian.Uint32(q)) }), nil
	case TypeFloat32:
		return decodeNums(p, 4, func(q []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(q)) }), nil
	case TypeUint64:
		return decodeNums(p, 8, binary.LittleEndian.Uint64), nil
	case TypeInt64:
		return decodeNums(p, 8, func(q []byte) int64 { return int64(binary.LittleEndian.Uint64(q)) }), nil
	case TypeFloat64:
		return decodeNums(p, 8, func(q []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(q)) }), nil
	}
	return nil, d.errf("%s: unknown element type %d", what, uint32(t))
}

func decodeNums[T any](p []byte, size int, dec func([]byte) T) []T {
	out := make([]T, len(p)/size)
	for i := range out {
		out[i] = dec(p[i*size:])
	}
	return out
}

func (d *decoder) tensorInfo(i uint64) (TensorInfo, error) {
	var t TensorInfo
	start := d.off
	name, err := d.str(fmt.Sprintf("tensor %d name", i))
	if err != nil {
		return t, err
	}
	if name == "" {
		return t, d.errAt(start, "tensor %d has an empty name", i)
	}
	t.Name = name
	what := fmt.Sprintf("tensor %q", name)
	nd, err := d.u32(what + " dimension count")
	if err != nil {
		return t, err
	}
	if nd > MaxDims {
		return t, d.errAt(start, "%s has %d dimensions; ggml allows at most %d", what, nd, MaxDims)
	}
	t.Shape = make([]uint64, nd)
	for j := range t.Shape {
		if t.Shape[j], err = d.u64(fmt.Sprintf("%s dimension %d", what, j)); err != nil {
			return t, err
		}
	}
	if _, err := numElements(t.Shape); err != nil {
		return t, d.errAt(start, "%s: %v", what, err)
	}
	typ, err := d.u32(what + " type")
	if err != nil {
		return t, err
	}
	t.Type = dtype.Type(typ)
	if _, _, ok := TypeSize(t.Type); !ok {
		return t, d.errAt(start, "%s has unknown ggml type %d; its size cannot be computed", what, typ)
	}
	if t.Offset, err = d.u64(what + " offset"); err != nil {
		return t, err
	}
	return t, nil
}
