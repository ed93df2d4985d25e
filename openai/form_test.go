package openai

import (
	"bytes"
	"mime/multipart"
	"strings"
	"testing"
)

// form is a multipart/form-data body of fields (name, value; a name
// "file" is a file part) and its Content-Type.
func form(t testing.TB, fields ...string) ([]byte, string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		var err error
		if fields[i] == "file" {
			var fw interface{ Write([]byte) (int, error) }
			fw, err = w.CreateFormFile("file", "a.wav")
			if err == nil {
				_, err = fw.Write([]byte(fields[i+1]))
			}
		} else {
			err = w.WriteField(fields[i], fields[i+1])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), w.FormDataContentType()
}

func TestFormModel(t *testing.T) {
	audio := strings.Repeat("RIFF\x00\x01--not a boundary\r\n", 1000)
	for _, tc := range []struct {
		fields []string
		want   string
	}{
		{[]string{"file", audio, "model", "whisper-large-v3", "language", "en"}, "whisper-large-v3"},
		{[]string{"model", "org/first", "file", audio, "model", "org/last"}, "org/last"},
		{[]string{"file", audio, "language", "en"}, ""},
		{[]string{"model", strings.Repeat("m", formMaxModel+1)}, ""},
	} {
		body, ct := form(t, tc.fields...)
		if got := FormModel(body, ct); got != tc.want {
			t.Errorf("%.40q: got %q, want %q", tc.fields, got, tc.want)
		}
	}
	body, _ := form(t, "model", "m")
	for _, ct := range []string{"", "application/json", "multipart/form-data", "multipart/form-data; boundary=other"} {
		if got := FormModel(body, ct); got != "" {
			t.Errorf("Content-Type %q: got %q", ct, got)
		}
	}
	// A file part named model is not the field.
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	fw, _ := w.CreateFormFile("model", "model.bin")
	_, _ = fw.Write([]byte("weights"))
	_ = w.Close()
	if got := FormModel(b.Bytes(), w.FormDataContentType()); got != "" {
		t.Errorf("a file part named model: got %q", got)
	}
}

func FuzzFormModel(f *testing.F) {
	body, ct := form(f, "file", "abc", "model", "whisper", "x", "y")
	f.Add(body, ct)
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b--\r\n"), "multipart/form-data; boundary=b")
	f.Add([]byte("--b\r\n\r\n--b--"), "multipart/form-data; boundary=\"b\"")
	f.Fuzz(func(t *testing.T, body []byte, ct string) {
		m := FormModel(body, ct)
		if len(m) > formMaxModel {
			t.Fatalf("a model name of %d bytes", len(m))
		}
	})
}
