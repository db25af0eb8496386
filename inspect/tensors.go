package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// TensorEntry is one tensor of the --tensors listing, with the JSON field names
// of the contract.
type TensorEntry struct {
	Name        string            `json:"name"`
	DType       safetensors.DType `json:"dtype"`
	Shape       []int64           `json:"shape"`
	File        string            `json:"file"`
	DataOffsets [2]int64          `json:"data_offsets"`
}

// FileEntry is one file of a listing or report. HeaderBytes counts the 8-byte
// length prefix too: it is what a header-only reader has to fetch.
type FileEntry struct {
	Path        string `json:"path"`
	HeaderBytes int64  `json:"header_bytes"`
	Size        int64  `json:"size"`
}

// fileEntry describes f for listings.
func fileEntry(f *safetensors.File) FileEntry {
	return FileEntry{Path: f.Path, HeaderBytes: f.DataStart, Size: f.Size}
}

// WriteTensorList lists every tensor of the checkpoint (files in name order,
// tensors in data order within a file): as a table, or with asJSON as one object
// {"tensors": [...], "files": [...]}. Rows are streamed, so the listing of the
// 497,220 tensors of K3 never exists in memory as a whole.
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
	w.WriteString(`{"tensors": [`)
	first := true
	for _, f := range ck.Files {
		for _, t := range f.Tensors {
			e := TensorEntry{Name: t.Name, DType: t.DType, Shape: nonNil(t.Shape), File: f.Path, DataOffsets: [2]int64{t.Begin, t.End}}
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

// writeTensorListTable streams the rows through tablewriter with column widths
// fixed up front from the longest cell, so no row is buffered.
func writeTensorListTable(w io.Writer, ck *safetensors.Checkpoint) error {
	head := []string{"name", "dtype", "shape", "file", "data_offsets"}
	widths := make([]int, len(head))
	for i, h := range head {
		widths[i] = len(h)
	}
	var scratch []byte
	for _, f := range ck.Files {
		widths[3] = max(widths[3], len(f.Path))
		for _, t := range f.Tensors {
			widths[0] = max(widths[0], len(t.Name))
			widths[1] = max(widths[1], len(t.DType.String()))
			scratch = appendShape(scratch[:0], t.Shape)
			widths[2] = max(widths[2], len(scratch))
			scratch = appendOffsets(scratch[:0], t.Begin, t.End)
			widths[4] = max(widths[4], len(scratch))
		}
	}
	cw := tw.NewMapper[int, int]()
	for i, n := range widths {
		cw.Set(i, n+2) // cell padding
	}
	tb := tablewriter.NewTable(w,
		tablewriter.WithStreaming(tw.StreamConfig{Enable: true, StrictColumns: true}),
		tablewriter.WithColumnWidths(cw),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRendition(tw.Rendition{Borders: tw.BorderNone,
			Settings: tw.Settings{Separators: tw.Separators{BetweenColumns: tw.Off, BetweenRows: tw.Off},
				Lines: tw.Lines{ShowHeaderLine: tw.On}}}),
		tablewriter.WithAlignment(tw.Alignment{tw.AlignLeft, tw.AlignLeft, tw.AlignLeft, tw.AlignLeft, tw.AlignLeft}),
	)
	if err := tb.Start(); err != nil {
		return err
	}
	tb.Header(head)
	row := make([]string, len(head))
	for _, f := range ck.Files {
		for _, t := range f.Tensors {
			row[0], row[1], row[3] = t.Name, t.DType.String(), f.Path
			row[2] = string(appendShape(scratch[:0], t.Shape))
			row[4] = string(appendOffsets(scratch[:0], t.Begin, t.End))
			if err := tb.Append(row); err != nil {
				return fmt.Errorf("file %s: tensor %s: %w", f.Path, t.Name, err)
			}
		}
	}
	return tb.Close()
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

func appendOffsets(b []byte, begin, end int64) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, begin, 10)
	b = append(b, ", "...)
	b = strconv.AppendInt(b, end, 10)
	return append(b, ']')
}

// nonNil makes a scalar's shape encode as [] rather than null.
func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}
