package optionscan

import (
	"os"
	"slices"
	"testing"
)

// TestConstructorsFindsExportedFunctionsReturningTheType: of testdata/pkg, only the exported
// functions with the type as their one result count: not an unexported one, one that also
// returns an error, a method, another result type or a function in a test file.
func TestConstructorsFindsExportedFunctionsReturningTheType(t *testing.T) {
	got, err := Constructors("testdata/pkg", "Option")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"WithA", "WithB"}; !slices.Equal(got, want) {
		t.Errorf("Constructors = %v, want %v", got, want)
	}
}

// TestConstructorsReportsUnparsableSource: a directory whose Go file does not parse is an error,
// not an empty list a test would take for "no options".
func TestConstructorsReportsUnparsableSource(t *testing.T) {
	dir := t.TempDir()
	if err := writeFile(dir+"/bad.go", "package bad\nfunc ("); err != nil {
		t.Fatal(err)
	}
	if names, err := Constructors(dir, "Option"); err == nil {
		t.Errorf("Constructors on a broken file = %v, nil; want an error", names)
	}
}

func writeFile(name, text string) error { return os.WriteFile(name, []byte(text), 0o644) }
