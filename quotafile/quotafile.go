// Package quotafile reads AcceleratorQuotas from files, folders and
// standard input, as kubectl apply -f takes them, naming the file and
// line of every document, and of every error. It splits the YAML stream
// itself: apimachinery's YAML reader and cli-runtime's builder return the
// documents without the line each starts on, which every message here
// names.
package quotafile

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	v1beta1 "ome.io/quota-manager/api/v1beta1"
)

// Write is one AcceleratorQuota read from a file, or a deletion.
type Write struct {
	// Source is "file:line" of the document, "" for a deletion.
	Source string
	Name   string
	// Spec is nil for a deletion.
	Spec *v1beta1.AcceleratorQuotaSpec
}

// Read reads every AcceleratorQuota document of the -f arguments, in
// order: a file, every .yaml, .yml and .json file of a folder (by name, not
// recursive), or "-" for standard input. Anything else is an error naming
// the file and line; command names what reads them, for that error.
func Read(args []string, stdin io.Reader, command string) ([]Write, error) {
	var out []Write
	for _, arg := range args {
		var paths []string
		if arg == "-" {
			paths = []string{"-"}
		} else {
			fi, err := os.Stat(arg)
			if err != nil {
				return nil, fmt.Errorf("the path %q does not exist", arg)
			}
			if fi.IsDir() {
				entries, err := os.ReadDir(arg)
				if err != nil {
					return nil, err
				}
				for _, e := range entries {
					if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
						paths = append(paths, filepath.Join(arg, e.Name()))
					}
				}
				slices.Sort(paths)
				if len(paths) == 0 {
					return nil, fmt.Errorf("%s holds no .yaml, .yml or .json file", arg)
				}
			} else {
				paths = []string{arg}
			}
		}
		for _, p := range paths {
			var data []byte
			var err error
			if p == "-" {
				data, err = io.ReadAll(stdin)
				p = "<stdin>"
			} else {
				data, err = os.ReadFile(p)
			}
			if err != nil {
				return nil, err
			}
			ws, err := parseDocuments(p, data, command)
			if err != nil {
				return nil, err
			}
			out = append(out, ws...)
		}
	}
	return out, nil
}

var (
	yamlLine     = regexp.MustCompile(`line (\d+)`)
	unknownField = regexp.MustCompile(`unknown field "(?:[^"]*\.)?([^".]+)"`)
)

// keyLine is the first line of doc that sets key, or def: the line of an
// unknown field, which the decoder does not say.
func keyLine(doc []byte, key string, def int) int {
	for i, l := range strings.Split(string(doc), "\n") {
		t := strings.TrimPrefix(strings.TrimSpace(l), "- ")
		if strings.HasPrefix(t, key+":") || strings.HasPrefix(t, `"`+key+`":`) {
			return i + 1
		}
	}
	return def
}

// parseDocuments splits a YAML stream on "---" lines and decodes each
// document that is not empty as an AcceleratorQuota, strictly: an unknown
// field is an error, as the API server's strict field validation makes it.
func parseDocuments(file string, data []byte, command string) ([]Write, error) {
	var out []Write
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var doc bytes.Buffer
	start, line := 1, 0
	flush := func() error {
		defer doc.Reset()
		if isBlank(doc.Bytes()) {
			return nil
		}
		w, err := decodeQuota(file, start, doc.Bytes(), command)
		if err != nil {
			return err
		}
		out = append(out, w)
		return nil
	}
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.HasPrefix(text, "---") && strings.TrimSpace(strings.SplitN(text[3:], "#", 2)[0]) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			start = line + 1
			continue
		}
		doc.WriteString(text + "\n")
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

func isBlank(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}

func decodeQuota(file string, start int, doc []byte, command string) (Write, error) {
	at := func(rel int) string { return file + ":" + strconv.Itoa(start+rel-1) }
	// The first line with content, for errors about the document as a whole.
	first := 1
	for i, l := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			first = i + 1
			break
		}
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return Write{}, fmt.Errorf("%s: the document does not parse: %s", at(lineOf(err, first)), cleanYAMLError(err))
	}
	if head.Kind != "AcceleratorQuota" || head.APIVersion != v1beta1.SchemeGroupVersion.String() {
		return Write{}, fmt.Errorf("%s: kind %q of apiVersion %q is not an AcceleratorQuota (apiVersion %s): %s checks AcceleratorQuotas only, remove the document or pass another file",
			at(first), head.Kind, head.APIVersion, v1beta1.SchemeGroupVersion, command)
	}
	var aq v1beta1.AcceleratorQuota
	if err := yaml.UnmarshalStrict(doc, &aq); err != nil {
		line := lineOf(err, first)
		if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
			line = keyLine(doc, m[1], line)
		}
		return Write{}, fmt.Errorf("%s: the AcceleratorQuota does not decode: %s", at(line), cleanYAMLError(err))
	}
	if aq.Name == "" {
		return Write{}, fmt.Errorf("%s: the AcceleratorQuota has no metadata.name: name it", at(first))
	}
	return Write{Source: at(first), Name: aq.Name, Spec: &aq.Spec}, nil
}

// lineOf is the line a YAML error names, within its document, or def.
func lineOf(err error, def int) int {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if n, e := strconv.Atoi(m[1]); e == nil && n > 0 {
			return n
		}
	}
	return def
}

func cleanYAMLError(err error) string {
	s := yamlLine.ReplaceAllString(err.Error(), "")
	s = strings.ReplaceAll(s, "yaml: : ", "yaml: ")
	s = strings.TrimPrefix(s, "error converting YAML to JSON: ")
	s = strings.TrimPrefix(s, "error unmarshaling JSON: while decoding JSON: ")
	s = strings.TrimPrefix(s, "json: ")
	return s
}
