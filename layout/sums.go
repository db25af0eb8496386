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

// sumsName is each export directory's list of the sha256 of every file a
// run writes there but itself and layout.json, in coreutils' sha256sum format
// ("HEX  NAME" lines, sorted by name). The safetensors files' sums are taken
// as their bytes stream out. layout.json stays last and lists no hash: it is
// compared byte for byte on a rerun, before the sums are known. A reassembly
// writes none: its tree is the source checkpoint's.
const sumsName = "SHA256SUMS"

const maxSumsFile = 16 << 20

// parseSums reads a SHA256SUMS; where names it in errors.
func parseSums(b []byte, where string) (map[string]string, error) {
	sums := map[string]string{}
	for i, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		hexSum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if !ok || !strings.HasSuffix(line, "\n") || len(hexSum) != 2*sha256.Size || strings.Trim(hexSum, "0123456789abcdef") != "" ||
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

// listedSums is what a SHA256SUMS read back lists (nil when not one).
func listedSums(b []byte, err error) map[string]string {
	if err != nil {
		return nil
	}
	sums, _ := parseSums(b, "")
	return sums
}

func localSlashName(name string) bool {
	return !strings.HasPrefix(name, "/") && name != ".." && !strings.HasPrefix(name, "../") && !strings.ContainsAny(name, "\\\x00")
}

// hasSums reports whether d's directory gets a SHA256SUMS (an export's).
func (d *dirPlan) hasSums() bool { return d.man != nil }

// sumsFile is the SHA256SUMS of d's directory, with files mapping each of
// its safetensors files to its sha256.
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
	var b bytes.Buffer
	for _, n := range slices.Sorted(maps.Keys(sums)) {
		fmt.Fprintf(&b, "%s  %s\n", sums[n], n)
	}
	return b.Bytes(), nil
}
