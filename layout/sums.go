package layout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// sumsName is each output directory's list of the sha256 of every file a
// run writes there, in the format of coreutils' sha256sum ("HEX  NAME", one
// line per file, sorted by name), so that `sha256sum -c SHA256SUMS` in the
// directory checks it. The safetensors files' sums are taken as their bytes
// stream out (filewrite hashes what it writes; nothing is read back); the
// side files', the index's and the completion record's from the bytes the
// plan holds. It is written after every other file but layout.json, which
// stays last and lists no hash: it is the plan's, compared byte for byte on
// a rerun, and the sums are not known before the files are written. A
// reassembly writes none: its tree is the source checkpoint's, file for
// file (a converted source carries its own manifest of sha256s along).
const sumsName = "SHA256SUMS"

// maxSumsFile bounds a SHA256SUMS read back (a line per file: a directory
// of a few thousand files lists a few hundred KB).
const maxSumsFile = 16 << 20

// sumsBytes is the SHA256SUMS of sums (name → hex sha256).
func sumsBytes(sums map[string]string) []byte {
	var b bytes.Buffer
	for _, n := range slices.Sorted(maps.Keys(sums)) {
		b.WriteString(sums[n])
		b.WriteString("  ")
		b.WriteString(n)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// parseSums reads a SHA256SUMS (what sumsBytes writes): where names it in
// errors.
func parseSums(b []byte, where string) (map[string]string, error) {
	sums := map[string]string{}
	for i, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		hexSum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if !ok || !strings.HasSuffix(line, "\n") || len(hexSum) != 2*sha256.Size || !isLowerHex(hexSum) ||
			name == "" || path.Clean(name) != name || !localSlashName(name) {
			return nil, fmt.Errorf("%w: %s: line %d is not \"SHA256  NAME\" for a file of the directory: the file was edited or damaged; write the directory again (--restart)", errManifest, where, i+1)
		}
		if _, dup := sums[name]; dup {
			return nil, fmt.Errorf("%w: %s: %s is listed twice: the file was edited or damaged; write the directory again (--restart)", errManifest, where, name)
		}
		sums[name] = hexSum
	}
	return sums, nil
}

// listedSums is what a SHA256SUMS read back (b, err) lists: nil when the
// read failed or the file is not one.
func listedSums(b []byte, err error) map[string]string {
	if err != nil {
		return nil
	}
	sums, _ := parseSums(b, "") // nil when not one
	return sums
}

func isLowerHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// localSlashName reports whether a slash-separated name stays inside its
// directory.
func localSlashName(name string) bool {
	return !strings.HasPrefix(name, "/") && name != ".." && !strings.HasPrefix(name, "../") && !strings.ContainsAny(name, "\\\x00")
}

// hasSums reports whether d's directory gets a SHA256SUMS: an export's
// (or shard's) does, a reassembly's does not.
func (d *dirPlan) hasSums() bool { return d.man != nil }

// sumsFile is the SHA256SUMS of d's directory: the files written from
// memory with the sums of their bytes, and files, which maps each
// safetensors file to its sha256 (every one of d.files must be there).
func (d *dirPlan) sumsFile(completion []byte, files map[string]string) ([]byte, error) {
	mem, err := d.memoryFiles(completion)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for n, b := range mem {
		s := sha256.Sum256(b)
		sums[n] = hex.EncodeToString(s[:])
	}
	for _, of := range d.files {
		s, ok := files[of.name]
		if !ok || s == "" {
			return nil, fmt.Errorf("layout: no sha256 recorded for %s", of.name)
		}
		sums[of.name] = s
	}
	return sumsBytes(sums), nil
}
