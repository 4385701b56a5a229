// write.go builds GGUF v3 files in gguf-py's GGUFWriter layout (header,
// metadata in insertion order, tensor infos, padding, then each tensor's bytes
// padded to the alignment), which llama.cpp loads. It is not a converter: it
// writes the bytes it is given and never quantizes.

package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/fileio"
)

// Writer accumulates metadata and tensors and writes them as one GGUF file.
// Tensor data is referenced, not copied: it must not change before WriteTo.
// Tensors added with AddTensorFunc are produced one at a time while the file
// is written, so a converter never holds the whole model in memory.
type Writer struct {
	kv        []KV
	keys      map[string]bool
	tensors   []TensorInfo // Data holds the caller's bytes; Offset set by layout
	sizes     []uint64     // byte size of each tensor
	fills     []func(dst []byte) error
	names     map[string]bool
	alignment uint64
}

// NewWriter returns an empty Writer with the default alignment.
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}, alignment: DefaultAlignment}
}

// Add appends a metadata entry; the GGUF type follows the Go type of value
// (see KV). Adding general.alignment (a uint32 power of two) also sets the
// alignment.
func (w *Writer) Add(key string, value any) error {
	if key == "" {
		return errors.New("gguf writer: empty metadata key")
	}
	if w.keys[key] {
		return fmt.Errorf("gguf writer: duplicate metadata key %q", key)
	}
	if _, err := valueType(value, 0); err != nil {
		return fmt.Errorf("gguf writer: key %q: %w", key, err)
	}
	if key == AlignmentKey {
		a, ok := value.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("gguf writer: %s must be a uint32 power of two, not %v (%T)", AlignmentKey, value, value)
		}
		w.alignment = uint64(a)
	}
	w.keys[key] = true
	w.kv = append(w.kv, KV{key, value})
	return nil
}

// SetAlignment sets the data alignment (a power of two). A non-default value
// is recorded as general.alignment (uint32), at this point in the metadata
// order unless it was already added.
func (w *Writer) SetAlignment(n int) error {
	if n <= 0 || n&(n-1) != 0 || n > math.MaxUint32 {
		return fmt.Errorf("gguf writer: alignment %d is not a power of two", n)
	}
	w.alignment = uint64(n)
	i := slices.IndexFunc(w.kv, func(kv KV) bool { return kv.Key == AlignmentKey })
	switch {
	case i >= 0 && n == DefaultAlignment:
		w.kv = slices.Delete(w.kv, i, i+1)
		delete(w.keys, AlignmentKey)
	case i >= 0:
		w.kv[i].Value = uint32(n)
	case n != DefaultAlignment:
		w.keys[AlignmentKey] = true
		w.kv = append(w.kv, KV{AlignmentKey, uint32(n)})
	}
	return nil
}

// AddTensor appends a tensor. shape is in ggml order (Shape[0] is the row
// length); data must be exactly the tensor's bytes for typ and shape.
func (w *Writer) AddTensor(name string, typ dtype.Type, shape []uint64, data []byte) error {
	n, err := w.checkTensor(name, typ, shape)
	if err != nil {
		return err
	}
	if uint64(len(data)) != n {
		return fmt.Errorf("gguf writer: tensor %q (%s, shape %v) has %d bytes of data; want %d", name, TypeName(typ), shape, len(data), n)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, TensorInfo{Name: name, Type: typ, Shape: slices.Clone(shape), Data: data})
	w.sizes = append(w.sizes, n)
	w.fills = append(w.fills, nil)
	return nil
}

// AddTensorFunc appends a tensor whose bytes fill writes into dst (exactly
// the tensor's size for typ and shape) when the file is written. dst is a
// buffer reused between tensors; an error from fill aborts the write.
func (w *Writer) AddTensorFunc(name string, typ dtype.Type, shape []uint64, fill func(dst []byte) error) error {
	n, err := w.checkTensor(name, typ, shape)
	if err != nil {
		return err
	}
	if fill == nil {
		return fmt.Errorf("gguf writer: tensor %q has no fill function", name)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, TensorInfo{Name: name, Type: typ, Shape: slices.Clone(shape)})
	w.sizes = append(w.sizes, n)
	w.fills = append(w.fills, fill)
	return nil
}

// checkTensor validates a new tensor and returns its size in bytes.
func (w *Writer) checkTensor(name string, typ dtype.Type, shape []uint64) (uint64, error) {
	switch {
	case name == "":
		return 0, errors.New("gguf writer: empty tensor name")
	case len(name) > MaxNameLen:
		return 0, fmt.Errorf("gguf writer: tensor name %q is %d bytes; llama.cpp allows at most %d", name, len(name), MaxNameLen)
	case w.names[name]:
		return 0, fmt.Errorf("gguf writer: duplicate tensor %q", name)
	case len(shape) == 0 || len(shape) > MaxDims:
		return 0, fmt.Errorf("gguf writer: tensor %q has %d dimensions; want 1 to %d", name, len(shape), MaxDims)
	}
	n, err := tensorBytes(typ, shape)
	if err != nil {
		return 0, fmt.Errorf("gguf writer: tensor %q: %w", name, err)
	}
	return n, nil
}

func (w *Writer) pad(n uint64) uint64 { return (w.alignment - n%w.alignment) % w.alignment }

// Size is the exact number of bytes WriteTo will write (the layout is
// deterministic), computed without producing any tensor data.
func (w *Writer) Size() int64 {
	cw := &countWriter{w: io.Discard}
	b := bufio.NewWriter(cw)
	e := &encoder{b: b}
	w.header(e)
	b.Flush()
	n := uint64(cw.n)
	for _, sz := range w.sizes {
		n += sz + w.pad(sz)
	}
	return int64(n)
}

// WriteTo writes the file to out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	cw := &countWriter{w: out}
	b := bufio.NewWriterSize(cw, 1<<20)
	e := &encoder{b: b}
	w.header(e)
	var buf []byte
	for i, t := range w.tensors {
		data := t.Data
		if f := w.fills[i]; f != nil && e.err == nil {
			if uint64(cap(buf)) < w.sizes[i] {
				buf = make([]byte, w.sizes[i])
			}
			data = buf[:w.sizes[i]]
			if err := f(data); err != nil {
				e.err = fmt.Errorf("tensor %s: %w", t.Name, err)
			}
		}
		e.raw(data)
		e.zeros(w.pad(w.sizes[i]))
	}
	if e.err == nil {
		e.err = b.Flush()
	}
	return cw.n, e.err
}

// header writes everything before the first tensor's bytes: magic, counts,
// metadata, tensor infos and the padding to the data section.
func (w *Writer) header(e *encoder) {
	e.raw([]byte(Magic))
	e.u32(Version)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kv)))
	for _, kv := range w.kv {
		e.str(kv.Key)
		t, _ := valueType(kv.Value, 0) // checked by Add
		e.u32(uint32(t))
		e.value(kv.Value)
	}
	var off uint64
	for i, t := range w.tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off += w.sizes[i] + w.pad(w.sizes[i])
	}
	e.zeros(w.pad(e.n))
}

// WriteFile writes the file to path atomically: to a temporary file in the
// same directory, synced, then renamed over path.
func (w *Writer) WriteFile(path string) error {
	err := fileio.WriteAtomic(path, func(out io.Writer) error {
		_, err := w.WriteTo(out)
		return err
	})
	if err != nil {
		return fmt.Errorf("gguf writer: %w", err)
	}
	return nil
}

// valueType maps a Go value to its GGUF type, checking nested arrays.
func valueType(v any, depth int) (ValueType, error) {
	switch v := v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float32:
		return TypeFloat32, nil
	case float64:
		return TypeFloat64, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64, []float32, []float64, []bool, []string:
		return TypeArray, nil
	case []any:
		if depth >= maxArrayDepth {
			return 0, fmt.Errorf("arrays nested deeper than %d", maxArrayDepth)
		}
		if _, err := elemType(v, depth); err != nil {
			return 0, err
		}
		return TypeArray, nil
	}
	return 0, fmt.Errorf("unsupported value type %T (want a sized integer, float32/64, bool, string, a slice of those, or []any of slices)", v)
}

// elemType is the single GGUF element type of a []any (uint8 when empty, as
// gguf-py writes).
func elemType(v []any, depth int) (ValueType, error) {
	et := TypeUint8
	for i, x := range v {
		t, err := valueType(x, depth+1)
		if err != nil {
			return 0, fmt.Errorf("element %d: %w", i, err)
		}
		if i == 0 {
			et = t
		} else if t != et {
			return 0, fmt.Errorf("array mixes %v (element 0) and %v (element %d)", et, t, i)
		}
	}
	return et, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type encoder struct {
	b   *bufio.Writer
	n   uint64 // bytes written so far
	err error
	tmp [8]byte
}

func (e *encoder) raw(p []byte) {
	if e.err != nil {
		return
	}
	_, e.err = e.b.Write(p)
	e.n += uint64(len(p))
}

func (e *encoder) zeros(n uint64) {
	var z [64]byte
	for n > 0 {
		k := min(n, uint64(len(z)))
		e.raw(z[:k])
		n -= k
	}
}

func (e *encoder) u8(v uint8)   { e.raw([]byte{v}) }
func (e *encoder) u16(v uint16) { e.raw(binary.LittleEndian.AppendUint16(e.tmp[:0], v)) }
func (e *encoder) u32(v uint32) { e.raw(binary.LittleEndian.AppendUint32(e.tmp[:0], v)) }
func (e *encoder) u64(v uint64) { e.raw(binary.LittleEndian.AppendUint64(e.tmp[:0], v)) }

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err != nil {
		return
	}
	_, e.err = e.b.WriteString(s)
	e.n += uint64(len(s))
}

// value writes v without its type tag (the caller wrote it, or it is an
// array element).
func (e *encoder) value(v any) {
	switch v := v.(type) {
	case uint8:
		e.u8(v)
	case int8:
		e.u8(uint8(v))
	case uint16:
		e.u16(v)
	case int16:
		e.u16(uint16(v))
	case uint32:
		e.u32(v)
	case int32:
		e.u32(uint32(v))
	case uint64:
		e.u64(v)
	case int64:
		e.u64(uint64(v))
	case float32:
		e.u32(math.Float32bits(v))
	case float64:
		e.u64(math.Float64bits(v))
	case bool:
		if v {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(v)
	case []uint8:
		arr(e, TypeUint8, v)
	case []int8:
		arr(e, TypeInt8, v)
	case []uint16:
		arr(e, TypeUint16, v)
	case []int16:
		arr(e, TypeInt16, v)
	case []uint32:
		arr(e, TypeUint32, v)
	case []int32:
		arr(e, TypeInt32, v)
	case []uint64:
		arr(e, TypeUint64, v)
	case []int64:
		arr(e, TypeInt64, v)
	case []float32:
		arr(e, TypeFloat32, v)
	case []float64:
		arr(e, TypeFloat64, v)
	case []bool:
		arr(e, TypeBool, v)
	case []string:
		arr(e, TypeString, v)
	case []any:
		et, _ := elemType(v, 0) // checked by Add
		arr(e, et, v)
	}
}

func arr[T any](e *encoder, et ValueType, v []T) {
	e.u32(uint32(et))
	e.u64(uint64(len(v)))
	for _, x := range v {
		e.value(x)
	}
}

// Has reports whether metadata key was added.
func (w *Writer) Has(key string) bool { return w.keys[key] }
