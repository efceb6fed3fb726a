// Package optionscan lists a package's option constructors from its source, so that a test
// can fail when a new option is not in its table.
package optionscan

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
)

// Constructors returns, sorted, the exported functions of the Go package in dir (test files
// left out) whose one result is the named type of that package, such as "Option".
func Constructors(dir, typeName string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("optionscan: %w", err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() || fd.Type.Results == nil || len(fd.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fd.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == typeName {
				names = append(names, fd.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}
