// Package gguf reads and writes GGUF files (version 3, llama.cpp's model
// format; version 2 is read too): header, typed metadata, tensor infos and an
// aligned data section. Open maps the file read-only and hands out tensor data
// as zero-copy views into the mapping; Writer produces files in gguf-py's
// layout, which llama.cpp loads.
//
// This package is not a model loader: it knows nothing of architectures or
// tensor names, and it does not decode weights (see internal/dtype).
//
// Layout (all integers little-endian):
//
//	"GGUF" u32 version, u64 tensor count, u64 metadata count
//	metadata:     string key, u32 value type, value        (repeated)
//	tensor infos: string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset
//	padding to the alignment, then the data section; each tensor's offset is
//	relative to the data section and a multiple of the alignment.
//
// A string is a u64 byte length and the bytes; an array is a u32 element
// type, a u64 count and the elements (nested arrays omit nothing: each inner
// array is again type, count, elements).
package gguf

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/fileio"
)

// Format constants.
const (
	Magic            = "GGUF"
	Version          = 3
	DefaultAlignment = 32
	// AlignmentKey is the metadata key that overrides DefaultAlignment.
	AlignmentKey = "general.alignment"
	// MaxDims is ggml's limit on tensor dimensions (GGML_MAX_DIMS).
	MaxDims = 4
	// MaxNameLen is the longest tensor name llama.cpp accepts (GGML_MAX_NAME-1).
	MaxNameLen = 63
)

// ValueType is a GGUF metadata value type id.
type ValueType uint32

// GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("gguf-type-%d", uint32(t))
}

// minSize is the smallest encoding of one value of type t, used to bound
// counts by the bytes that remain before allocating.
func (t ValueType) minSize() uint64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64, TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return 0
}

// KV is one metadata entry. Value is one of uint8, int8, uint16, int16,
// uint32, int32, uint64, int64, float32, float64, bool, string; a typed slice
// of one of those for an array; or []any (whose elements are again such
// slices) for an array of arrays.
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor.
type TensorInfo struct {
	Name string
	Type dtype.Type
	// Shape is in ggml order: Shape[0] = ne0 is the row length (innermost,
	// contiguous); a matrix with r rows of c columns has Shape {c, r}.
	Shape []uint64
	// Offset of the tensor's bytes, relative to the data section.
	Offset uint64
	// Data is exactly the tensor's bytes, a read-only view into the file
	// mapping: valid until File.Close, and writing to it faults.
	Data []byte
}

// NumElements is the product of the shape.
func (t *TensorInfo) NumElements() uint64 {
	n, _ := numElements(t.Shape) // validated when parsed
	return n
}

// File is a parsed GGUF file.
type File struct {
	Path    string
	Version uint32
	KV      []KV // in file order
	Tensors []TensorInfo
	// Alignment of tensor data (general.alignment, default 32).
	Alignment uint64
	// DataOffset is the absolute file offset of the data section.
	DataOffset uint64

	kv      map[string]int // key → index in KV
	tensors map[string]int // name → index in Tensors
	mapping []byte         // non-nil when Open mapped the file
}

// Close unmaps the file. Tensor Data must not be used afterwards.
func (f *File) Close() error {
	m := f.mapping
	f.mapping = nil
	for i := range f.Tensors {
		f.Tensors[i].Data = nil
	}
	return fileio.Unmap(m)
}

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// ErrKeyNotFound is wrapped by accessor errors for a missing metadata key.
var ErrKeyNotFound = errors.New("metadata key not found")

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("malformed GGUF")

// FormatError reports a malformed or truncated file.
type FormatError struct {
	Path   string
	Offset int64 // byte offset where the problem was found
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("gguf %s: %s (at byte %d)", e.Path, e.Msg, e.Offset)
}

func (e *FormatError) Unwrap() error { return ErrFormat }

// Has reports whether the metadata holds key.
func (f *File) Has(key string) bool {
	_, ok := f.kv[key]
	return ok
}

// Value returns the raw metadata value of key.
func (f *File) Value(key string) (any, bool) {
	i, ok := f.kv[key]
	if !ok {
		return nil, false
	}
	return f.KV[i].Value, true
}

func (f *File) get(key string) (any, error) {
	v, ok := f.Value(key)
	if !ok {
		return nil, fmt.Errorf("gguf %s: key %q: %w", f.Path, key, ErrKeyNotFound)
	}
	return v, nil
}

func (f *File) typeErr(key string, v any, want string) error {
	return fmt.Errorf("gguf %s: key %q has type %s; want %s", f.Path, key, typeName(v), want)
}

// typeName names the GGUF type of a metadata value for error messages.
func typeName(v any) string {
	switch v := v.(type) {
	case []any:
		return "array of arrays"
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64, []float32, []float64, []bool, []string:
		return "array of " + strings.TrimPrefix(fmt.Sprintf("%T", v), "[]")
	}
	return fmt.Sprintf("%T", v)
}

// String returns the string value of key.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", f.typeErr(key, v, "string")
	}
	return s, nil
}

// Bool returns the bool value of key.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, f.typeErr(key, v, "bool")
	}
	return b, nil
}

// asInt widens any integer value; big is set for a uint64 above MaxInt64.
func asInt(v any) (i int64, big uint64, ok bool) {
	switch v := v.(type) {
	case uint8:
		return int64(v), 0, true
	case int8:
		return int64(v), 0, true
	case uint16:
		return int64(v), 0, true
	case int16:
		return int64(v), 0, true
	case uint32:
		return int64(v), 0, true
	case int32:
		return int64(v), 0, true
	case int64:
		return v, 0, true
	case uint64:
		if v > math.MaxInt64 {
			return 0, v, true
		}
		return int64(v), 0, true
	}
	return 0, 0, false
}

// Uint returns the value of key, which may have any integer type but must
// not be negative.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	i, big, ok := asInt(v)
	switch {
	case !ok:
		return 0, f.typeErr(key, v, "an unsigned integer")
	case big != 0:
		return big, nil
	case i < 0:
		return 0, fmt.Errorf("gguf %s: key %q is %d; want a non-negative integer", f.Path, key, i)
	}
	return uint64(i), nil
}

// Int returns the value of key, which may have any integer type that fits
// int64.
func (f *File) Int(key string) (int64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	i, big, ok := asInt(v)
	switch {
	case !ok:
		return 0, f.typeErr(key, v, "an integer")
	case big != 0:
		return 0, fmt.Errorf("gguf %s: key %q is %d; too large for int64", f.Path, key, big)
	}
	return i, nil
}

// Float returns the value of key, which may be a float or an integer.
func (f *File) Float(key string) (float64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case float32:
		return float64(v), nil
	case float64:
		return v, nil
	}
	i, big, ok := asInt(v)
	switch {
	case !ok:
		return 0, f.typeErr(key, v, "a number")
	case big != 0:
		return float64(big), nil
	}
	return float64(i), nil
}

// Strings returns the string array value of key.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.([]string)
	if !ok {
		return nil, f.typeErr(key, v, "array of string")
	}
	return s, nil
}

// Ints returns the value of key, an array of any integer type, widened.
func (f *File) Ints(key string) ([]int64, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case []int64:
		return v, nil
	case []uint8:
		return widen(v), nil
	case []int8:
		return widen(v), nil
	case []uint16:
		return widen(v), nil
	case []int16:
		return widen(v), nil
	case []uint32:
		return widen(v), nil
	case []int32:
		return widen(v), nil
	case []uint64:
		out := make([]int64, len(v))
		for i, x := range v {
			if x > math.MaxInt64 {
				return nil, fmt.Errorf("gguf %s: key %q element %d is %d; too large for int64", f.Path, key, i, x)
			}
			out[i] = int64(x)
		}
		return out, nil
	}
	return nil, f.typeErr(key, v, "array of integers")
}

func widen[T uint8 | int8 | uint16 | int16 | uint32 | int32](v []T) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// Floats returns the value of key, an array of floats or integers, widened
// to float64.
func (f *File) Floats(key string) ([]float64, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case []float64:
		return v, nil
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, nil
	case []uint64:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, nil
	}
	if is, err := f.Ints(key); err == nil {
		out := make([]float64, len(is))
		for i, x := range is {
			out[i] = float64(x)
		}
		return out, nil
	}
	return nil, f.typeErr(key, v, "array of numbers")
}
