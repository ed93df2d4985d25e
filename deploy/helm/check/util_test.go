package check

import (
	"bufio"
	"bytes"
	"regexp"

	"k8s.io/apimachinery/pkg/labels"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

func labelSet(m map[string]string) labels.Set { return labels.Set(m) }

// stripComments drops YAML comment lines (Helm's "# Source:" headers).
func stripComments(b []byte) []byte { return commentLine.ReplaceAll(b, nil) }

var commentLine = regexp.MustCompile(`(?m)^\s*#.*$`)
