package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// tensorItem is one tensor of the --tensors listing.
type tensorItem struct {
	Name        string            `json:"name"`
	DType       safetensors.DType `json:"dtype"`
	Shape       []int64           `json:"shape"`
	File        string            `json:"file"`
	DataOffsets [2]int64          `json:"data_offsets"`
}

// fileItem is one file of a listing or report; HeaderBytes counts the length prefix too.
type fileItem struct {
	Path        string `json:"path"`
	HeaderBytes int64  `json:"header_bytes"`
	Size        int64  `json:"size"`
}

func fileEntry(f *safetensors.File) fileItem {
	return fileItem{Path: f.Path, HeaderBytes: f.DataStart, Size: f.Size}
}

// tensorListSchema is the "schema" of the JSON listing (every --json output's).
const tensorListSchema = 1

// WriteTensorList streams every tensor (files in name order, tensors in data
// order) as a table with control characters escaped, or with asJSON as
// {"schema": 1, "tensors": [...], "files": [...]}.
func WriteTensorList(w io.Writer, ck *safetensors.Checkpoint, asJSON bool) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var err error
	if asJSON {
		err = writeTensorListJSON(bw, ck)
	} else {
		err = writeTensorListTable(bw, ck)
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

func writeTensorListJSON(w *bufio.Writer, ck *safetensors.Checkpoint) error {
	var scratch bytes.Buffer
	enc := json.NewEncoder(&scratch)
	enc.SetEscapeHTML(false)
	// item writes one array element on its own line, without Encode's newline.
	item := func(first bool, v any) error {
		scratch.Reset()
		if err := enc.Encode(v); err != nil {
			return err
		}
		if !first {
			w.WriteByte(',')
		}
		w.WriteString("\n  ")
		w.Write(bytes.TrimSuffix(scratch.Bytes(), []byte("\n")))
		return nil
	}
	fmt.Fprintf(w, `{"schema": %d, "tensors": [`, tensorListSchema)
	first := true
	for _, f := range ck.Files {
		for _, t := range f.Tensors {
			shape := t.Shape
			if shape == nil {
				shape = []int64{} // a scalar's shape encodes as [], not null
			}
			e := tensorItem{Name: t.Name, DType: t.DType, Shape: shape, File: f.Path, DataOffsets: [2]int64{t.Begin, t.End}}
			if err := item(first, e); err != nil {
				return fmt.Errorf("file %s: tensor %s: %w", f.Path, t.Name, err)
			}
			first = false
		}
	}
	w.WriteString("\n],\n\"files\": [")
	for i, f := range ck.Files {
		if err := item(i == 0, fileEntry(f)); err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	_, err := w.WriteString("\n]}\n")
	return err
}

// writeTensorListTable streams rows aligned to widths measured up front (a
// table library's cost per row adds up to seconds over K3).
func writeTensorListTable(w *bufio.Writer, ck *safetensors.Checkpoint) error {
	head := []string{"name", "dtype", "shape", "file", "data_offsets"}
	widths := cellWidths([][]string{head})
	var scratch []byte
	for _, f := range ck.Files {
		widths[3] = max(widths[3], textWidth(termtext.Name(f.Path)))
		for _, t := range f.Tensors {
			widths[0] = max(widths[0], textWidth(termtext.Name(t.Name)))
			widths[1] = max(widths[1], len(t.DType.String()))
			scratch = appendShape(scratch[:0], t.Shape)
			widths[2] = max(widths[2], len(scratch))
		}
	}
	var line []byte
	emit := func(cells ...string) error {
		line = line[:0]
		for i, c := range cells {
			line = append(line, c...)
			if i < len(cells)-1 {
				for n := textWidth(c); n < widths[i]+2; n++ {
					line = append(line, ' ')
				}
			}
		}
		line = append(line, '\n')
		_, err := w.Write(line)
		return err
	}
	if err := emit(head...); err != nil {
		return err
	}
	rule := make([]string, len(head))
	for i := range head {
		rule[i] = strings.Repeat("-", widths[i])
	}
	if err := emit(rule...); err != nil {
		return err
	}
	for _, f := range ck.Files {
		path := termtext.Name(f.Path)
		for _, t := range f.Tensors {
			shape := string(appendShape(scratch[:0], t.Shape))
			offs := string(appendShape(scratch[:0], []int64{t.Begin, t.End}))
			if err := emit(termtext.Name(t.Name), t.DType.String(), shape, path, offs); err != nil {
				return err
			}
		}
	}
	return nil
}

func appendShape(b []byte, shape []int64) []byte {
	b = append(b, '[')
	for i, d := range shape {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return append(b, ']')
}
