// Package safetensors reads and writes Hugging Face safetensors files and
// model directories (one model.safetensors, or shards listed by
// model.safetensors.index.json). Files are mapped read-only and tensor data is
// handed out as zero-copy views into the mapping.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
//
//	{"__metadata__": {"k": "v"}, "name": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...}
//
// (padded with spaces), then the data; offsets are relative to the data.
// Shapes are row-major, outermost dimension first (the reverse of ggml's).
//
// This package is not a model loader: it knows nothing of config.json or
// tensor names, and it does not convert dtypes (see internal/dtype).
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/draftd/draftd/internal/fileio"
)

// MaxDims and MaxNameLen bound a tensor's shape and name: no language-model
// weight has more than a few dimensions or a name near a kilobyte, and every
// message that quotes them stays short.
const (
	MaxDims    = 8
	MaxNameLen = 1024
)

// MaxHeaderLen is the largest JSON header accepted, as in the reference
// implementation (100 MB).
const MaxHeaderLen = 100 << 20

// MetadataKey is the header entry holding free-form string metadata.
const MetadataKey = "__metadata__"

// Tensor is one tensor of a file.
type Tensor struct {
	Name  string
	DType string  // "F32", "F16", "BF16", "F8_E4M3", ...
	Shape []int64 // row-major, outermost first
	// Data is exactly the tensor's bytes: a read-only view into the file
	// mapping, valid until the File (or Dir) is closed.
	Data []byte
	// File is the path of the file holding the tensor.
	File string

	begin uint64 // Data's offset in the data section, set by Parse
}

// NumElements is the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t *Tensor) end() uint64 { return t.begin + uint64(len(t.Data)) }

// dtypeBits is the storage size of one element of each dtype.
var dtypeBits = map[string]int{
	"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32,
	"I64": 64, "U64": 64, "F64": 64, "C64": 64,
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

// ElemBits is the size in bits of one element of dtype; ok is false for a
// dtype this package does not know.
func ElemBits(dtype string) (bits int, ok bool) {
	bits, ok = dtypeBits[dtype]
	return bits, ok
}

// ByteSize is the storage size of a tensor of dtype and shape, or an error
// for an unknown dtype, a negative dimension, overflow, or a bit count that
// is not a whole number of bytes.
func ByteSize(dtype string, shape []int64) (int64, error) {
	bits, ok := dtypeBits[dtype]
	if !ok {
		if len(dtype) > 32 {
			return 0, fmt.Errorf("unknown dtype %q… (%d bytes)", strings.ToValidUTF8(dtype[:32], ""), len(dtype))
		}
		return 0, fmt.Errorf("unknown dtype %q", dtype)
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > (1<<62)/d {
			return 0, fmt.Errorf("shape %v: element count overflows", shape)
		}
		n *= d
	}
	if n > (1<<62)/int64(bits) {
		return 0, fmt.Errorf("shape %v: size overflows", shape)
	}
	if n*int64(bits)%8 != 0 {
		return 0, fmt.Errorf("%d elements of %d-bit %s are not a whole number of bytes", n, bits, dtype)
	}
	return n * int64(bits) / 8, nil
}

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("malformed safetensors")

// FormatError reports a malformed or truncated file.
type FormatError struct {
	Path   string
	Tensor string // empty when the problem is not about one tensor
	Msg    string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		name := e.Tensor
		if len(name) > 96 {
			name = strings.ToValidUTF8(name[:96], "") + "… (" + strconv.Itoa(len(e.Tensor)) + " bytes)"
		}
		return fmt.Sprintf("safetensors %s: tensor %q: %s", e.Path, name, e.Msg)
	}
	return fmt.Sprintf("safetensors %s: %s", e.Path, e.Msg)
}

func (e *FormatError) Unwrap() error { return ErrFormat }

// File is one parsed safetensors file.
type File struct {
	Path     string
	Metadata map[string]string // __metadata__, nil when absent
	// HeaderLen is N, the JSON header length; data starts at 8+N.
	HeaderLen uint64

	tensors []Tensor // in data order
	index   map[string]int
	mapping []byte
}

// Tensors returns the tensors in the order of their data. The slice is the
// File's own: do not modify it.
func (f *File) Tensors() []Tensor { return f.tensors }

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	i, ok := f.index[name]
	if !ok {
		return nil, false
	}
	return &f.tensors[i], true
}

// Close unmaps the file; tensor Data must not be used afterwards.
func (f *File) Close() error {
	m := f.mapping
	f.mapping = nil
	for i := range f.tensors {
		f.tensors[i].Data = nil
	}
	return fileio.Unmap(m)
}

// Open maps the safetensors file at path read-only and parses it.
func Open(path string) (*File, error) {
	data, err := fileio.Map(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Parse(path, data)
	if err != nil {
		fileio.Unmap(data)
		return nil, err
	}
	f.mapping = data
	return f, nil
}

type headerEntry struct {
	DType       *string   `json:"dtype"`
	Shape       *[]int64  `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// Parse parses a safetensors file held in data; name is used in errors and
// as Tensor.File. Tensor Data slices alias data.
func Parse(name string, data []byte) (*File, error) {
	bad := func(tensor, format string, args ...any) error {
		return &FormatError{Path: name, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) < 8 {
		return nil, bad("", "file is %d bytes; too short for the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderLen {
		return nil, bad("", "header length %d exceeds the %d-byte limit", n, MaxHeaderLen)
	}
	if n > uint64(len(data)-8) {
		return nil, bad("", "header length %d runs past the end of the %d-byte file", n, len(data))
	}
	hdr, body := data[8:8+n], data[8+n:]
	f := &File{Path: name, HeaderLen: n, index: map[string]int{}}

	dec := json.NewDecoder(bytes.NewReader(hdr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad("", "header is not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("", "header JSON: %v", err)
		}
		key := tok.(string) // object keys are always strings
		if seen[key] {
			return nil, bad("", "duplicate header key %q", key)
		}
		seen[key] = true
		if key == "" {
			return nil, bad("", "empty tensor name")
		}
		if key == MetadataKey {
			if err := dec.Decode(&f.Metadata); err != nil {
				return nil, bad("", "%s: %v", MetadataKey, err)
			}
			continue
		}
		var e headerEntry
		if err := dec.Decode(&e); err != nil {
			return nil, bad(key, "header entry: %v", err)
		}
		t, err := f.tensor(key, e, body)
		if err != nil {
			return nil, err
		}
		f.index[key] = len(f.tensors)
		f.tensors = append(f.tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("", "header JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("", "header has trailing data after the JSON object")
	}

	// Data order, then overlap check.
	slices.SortStableFunc(f.tensors, func(a, b Tensor) int { return cmp.Compare(a.begin, b.begin) })
	for i := range f.tensors {
		f.index[f.tensors[i].Name] = i
	}
	var last *Tensor // the tensor reaching furthest so far
	for i := range f.tensors {
		q := &f.tensors[i]
		if last != nil && len(q.Data) > 0 && q.begin < last.end() {
			return nil, bad(q.Name, "data [%d, %d) overlaps tensor %q [%d, %d)",
				q.begin, q.end(), last.Name, last.begin, last.end())
		}
		if last == nil || q.end() > last.end() {
			last = q
		}
	}
	return f, nil
}

func (f *File) tensor(name string, e headerEntry, body []byte) (Tensor, error) {
	bad := func(format string, args ...any) error {
		return &FormatError{Path: f.Path, Tensor: name, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case e.DType == nil:
		return Tensor{}, bad("missing dtype")
	case e.Shape == nil:
		return Tensor{}, bad("missing shape")
	case e.DataOffsets == nil:
		return Tensor{}, bad("missing data_offsets")
	case len(*e.DataOffsets) != 2:
		return Tensor{}, bad("data_offsets has %d values; want [begin, end]", len(*e.DataOffsets))
	case len(*e.Shape) > MaxDims:
		return Tensor{}, bad("shape has %d dimensions; draftd reads at most %d", len(*e.Shape), MaxDims)
	case len(name) > MaxNameLen:
		return Tensor{}, bad("name of %d bytes; draftd reads names of at most %d", len(name), MaxNameLen)
	}
	size, err := ByteSize(*e.DType, *e.Shape)
	if err != nil {
		return Tensor{}, bad("%v", err)
	}
	begin, end := (*e.DataOffsets)[0], (*e.DataOffsets)[1]
	switch {
	case end < begin:
		return Tensor{}, bad("data_offsets [%d, %d] end before begin", begin, end)
	case end > uint64(len(body)):
		return Tensor{}, bad("data_offsets [%d, %d] run past the %d bytes of data", begin, end, len(body))
	case end-begin != uint64(size):
		return Tensor{}, bad("data_offsets [%d, %d] hold %d bytes; %s %v needs %d", begin, end, end-begin, *e.DType, *e.Shape, size)
	}
	return Tensor{Name: name, DType: *e.DType, Shape: *e.Shape, Data: body[begin:end:end], File: f.Path, begin: begin}, nil
}
