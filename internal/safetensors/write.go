// write.go writes safetensors files the way the Hugging Face reference
// implementation lays them out (JSON header padded with spaces to a multiple
// of 8, then tensor bytes back to back) and sharded model directories with
// model.safetensors.index.json. It is not a converter: it writes the bytes it
// is given.

package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/draftd/draftd/internal/fileio"
)

// Write writes tensors, in the given order, and metadata (may be nil) to
// path, atomically (temporary file, then rename). Name, DType, Shape and Data
// of each tensor are used; Data must be exactly the tensor's bytes.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	hdr, err := header(tensors, metadata, true)
	if err != nil {
		return fmt.Errorf("safetensors write %s: %w", path, err)
	}
	return fileio.WriteAtomic(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		binary.Write(bw, binary.LittleEndian, uint64(len(hdr)))
		bw.Write(hdr)
		for _, t := range tensors {
			if _, err := bw.Write(t.Data); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

// WriteStream writes tensors, in the given order, and metadata (may be nil)
// to path, atomically, like Write, but without holding their bytes: Name,
// DType and Shape of each tensor are used (Data is ignored), and fill(i, dst)
// writes tensor i's bytes into dst, a buffer of exactly its size that is
// reused for the next tensor. Only one tensor's bytes are in memory at a
// time.
func WriteStream(path string, tensors []Tensor, metadata map[string]string, fill func(i int, dst []byte) error) error {
	hdr, err := header(tensors, metadata, false)
	if err != nil {
		return fmt.Errorf("safetensors write %s: %w", path, err)
	}
	return fileio.WriteAtomic(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		binary.Write(bw, binary.LittleEndian, uint64(len(hdr)))
		bw.Write(hdr)
		var buf []byte
		for i, t := range tensors {
			size, _ := ByteSize(t.DType, t.Shape) // checked by header
			if int64(cap(buf)) < size {
				buf = make([]byte, size)
			}
			buf = buf[:size]
			if err := fill(i, buf); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			if _, err := bw.Write(buf); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

// header builds the padded JSON header and checks every tensor (its Data
// too when withData).
func header(tensors []Tensor, metadata map[string]string, withData bool) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	if len(metadata) > 0 {
		m, _ := json.Marshal(metadata) // sorted keys
		b.WriteString(`"` + MetadataKey + `":`)
		b.Write(m)
	}
	seen := map[string]bool{}
	var off int64
	for _, t := range tensors {
		switch {
		case t.Name == "" || t.Name == MetadataKey:
			return nil, fmt.Errorf("invalid tensor name %q", t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("duplicate tensor %q", t.Name)
		}
		seen[t.Name] = true
		size, err := ByteSize(t.DType, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if withData && int64(len(t.Data)) != size {
			return nil, fmt.Errorf("tensor %q (%s %v) has %d bytes of data; want %d", t.Name, t.DType, t.Shape, len(t.Data), size)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		entry, _ := json.Marshal(struct {
			DType       string   `json:"dtype"`
			Shape       []int64  `json:"shape"`
			DataOffsets [2]int64 `json:"data_offsets"`
		}{t.DType, shape, [2]int64{off, off + size}})
		b.Write(name)
		b.WriteByte(':')
		b.Write(entry)
		off += size
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), nil
}

// WriteSharded writes tensors into dir as Hugging Face does: in the given
// order, a new shard starting whenever the next tensor would push the current
// one past maxShardBytes (a tensor larger than that gets a shard of its own;
// maxShardBytes <= 0 means no limit). One shard is written as
// model.safetensors (and a stale index is removed); several as
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
func WriteSharded(dir string, tensors []Tensor, maxShardBytes int64) error {
	if _, err := header(tensors, nil, true); err != nil {
		return fmt.Errorf("safetensors write %s: %w", dir, err)
	}
	var shards [][]Tensor
	var cur []Tensor
	var curBytes, total int64
	for _, t := range tensors {
		n := int64(len(t.Data))
		if len(cur) > 0 && maxShardBytes > 0 && curBytes+n > maxShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, t)
		curBytes += n
		total += n
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	indexPath := filepath.Join(dir, IndexName)
	if len(shards) == 1 {
		if err := Write(filepath.Join(dir, SingleName), shards[0], nil); err != nil {
			return err
		}
		if err := os.Remove(indexPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	idx := index{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
	for i, shard := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := Write(filepath.Join(dir, name), shard, nil); err != nil {
			return err
		}
		for _, t := range shard {
			idx.WeightMap[t.Name] = name
		}
	}
	raw, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return fileio.WriteAtomic(indexPath, func(w io.Writer) error {
		_, err := w.Write(append(raw, '\n'))
		return err
	})
}
