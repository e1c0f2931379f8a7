package main

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Issue 24: every error code the gateway makes is in
// docs/troubleshooting.md. The test below finds the codes in the source
// (the Code of every apierror.Error the code builds, followed back through
// the helpers that pass a code on) and requires a row for each in the
// doc's index, "Every error code"; a row whose code the source no longer
// makes fails too.

// runtimeCode is a code argument the scan cannot resolve to a string
// constant, because it is made at run time: it is listed with the reason
// and the codes it makes, which the index must hold like the rest.
type runtimeCode struct {
	file   string // relative to the repository root
	expr   string // the argument, as written
	reason string
	codes  []string
}

// runtimeCodes lists every code argument made at run time. A new one fails
// the test until it is listed here (or, better, written as a constant).
var runtimeCodes = []runtimeCode{
	{
		file:   "internal/codec/request.go",
		expr:   `"invalid_"+name`,
		reason: "boundedInt names the integer decision field it refuses (fieldNames[f]); it reads the output-limit aliases (limitFields) and the choice aliases (choiceFields: n, best_of, n_cmpl)",
		codes: []string{"invalid_max_tokens", "invalid_max_completion_tokens", "invalid_max_output_tokens",
			"invalid_max_new_tokens", "invalid_n_predict", "invalid_n", "invalid_best_of", "invalid_n_cmpl"},
	},
}

// scanModule is the module path of the repository, which the scan resolves
// imports of to directories.
const scanModule = "llmgate"

// scanGOOS are the systems the scan type-checks for, so that files behind
// build constraints (engine process control differs on Windows) are read:
// between them they take every file (the scan fails on one they do not).
var scanGOOS = []string{"linux", "windows"}

func TestTroubleshooting_NamesEveryErrorCode(t *testing.T) {
	found, bad, err := scanErrorCodes(repoRoot, scanModule, []string{"internal", "cmd"})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, rc := range runtimeCodes {
		listed[rc.file+"\x00"+rc.expr] = true
	}
	used := map[string]bool{}
	for _, b := range bad {
		k := b.file + "\x00" + b.expr
		if listed[k] {
			used[k] = true
			continue
		}
		t.Errorf("%s:%d: the error code %s is not a string constant (%s): write it as a literal or a constant, "+
			"or list it in runtimeCodes with the reason and the codes it makes", b.file, b.line, b.expr, b.why)
	}
	for _, rc := range runtimeCodes {
		if !used[rc.file+"\x00"+rc.expr] {
			t.Errorf("runtimeCodes lists %s in %s, which the scan no longer finds: remove the entry", rc.expr, rc.file)
			continue
		}
		for _, c := range rc.codes {
			if _, ok := found[c]; !ok {
				found[c] = rc.file
			}
		}
	}
	if len(found) < 50 {
		t.Fatalf("found only %d error codes in the source; is the scan broken? %v", len(found), found)
	}

	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	index, err := codeIndex(string(b))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range indexProblems(found, index) {
		t.Error(p)
	}
	t.Logf("%d error codes in the source, %d rows in the index", len(found), len(index))
}

// indexProblems compares the codes the source makes (with where) with the
// index's rows: a code without a row, a row without a code, a row out of
// order or given twice.
func indexProblems(found map[string]string, index []string) []string {
	var out []string
	inIndex := map[string]bool{}
	for i, c := range index {
		if inIndex[c] {
			out = append(out, fmt.Sprintf("docs/troubleshooting.md: %q has two rows in %q", c, codeIndexHeading))
		}
		inIndex[c] = true
		if i > 0 && index[i-1] > c {
			out = append(out, fmt.Sprintf("docs/troubleshooting.md: %q is out of order in %q (after %q): keep the rows sorted", c, codeIndexHeading, index[i-1]))
		}
		if _, ok := found[c]; !ok {
			out = append(out, fmt.Sprintf("docs/troubleshooting.md: %q in %q is no error code the source makes: remove its row, or fix its name", c, codeIndexHeading))
		}
	}
	codes := make([]string, 0, len(found))
	for c := range found {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		if !inIndex[c] {
			out = append(out, fmt.Sprintf("error code %q (%s) has no row in docs/troubleshooting.md's %q: add one saying what it means and what to do", c, found[c], codeIndexHeading))
		}
	}
	return out
}

// codeIndexHeading is the heading of the code index in troubleshooting.md.
const codeIndexHeading = "Every error code"

// codeIndex returns the codes of the index's table rows, in order: the
// code span of each row's first cell.
func codeIndex(md string) ([]string, error) {
	_, after, ok := strings.Cut(md, "\n## "+codeIndexHeading+"\n")
	if !ok {
		return nil, fmt.Errorf("docs/troubleshooting.md has no section %q", codeIndexHeading)
	}
	if i := strings.Index(after, "\n## "); i >= 0 {
		after = after[:i]
	}
	var out []string
	for _, l := range strings.Split(after, "\n") {
		cells := strings.Split(l, "|")
		if !strings.HasPrefix(l, "|") || len(cells) < 3 || strings.Trim(cells[1], " -") == "" {
			continue
		}
		m := codeCellRE.FindStringSubmatch(strings.TrimSpace(cells[1]))
		if m == nil {
			if strings.TrimSpace(cells[1]) == "code" {
				continue // the header
			}
			return nil, fmt.Errorf("docs/troubleshooting.md: a row of %q does not start with one `code`: %s", codeIndexHeading, l)
		}
		out = append(out, m[1])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("docs/troubleshooting.md: %q has no rows", codeIndexHeading)
	}
	return out, nil
}

var codeCellRE = regexp.MustCompile("^`([a-z0-9]+(?:_[a-z0-9]+)*)`$")

// badCode is a code argument the scan cannot resolve.
type badCode struct {
	file string // relative to the scanned root
	line int
	expr string // as written
	why  string
}

// scanErrorCodes returns the error codes the non-test Go files under dirs
// (relative to root, a module named module) make, each with one place it
// is made (file:line), and the code arguments it cannot resolve. A code is
// the Code field of an apierror.Error: set in a composite literal or by
// assignment, to a string constant, to a local variable (every value
// assigned to it), or to a parameter (the argument of every call of its
// function or function literal, followed as far as needed).
func scanErrorCodes(root, module string, dirs []string) (map[string]string, []badCode, error) {
	found := map[string]string{}
	seen := map[string]bool{}
	var bad []badCode
	parsed := &parseCache{fset: token.NewFileSet(), files: map[string]*ast.File{}}
	for _, goos := range scanGOOS {
		s, err := newCodeScanner(root, module, goos, dirs, parsed)
		if err != nil {
			return nil, nil, err
		}
		codes, b := s.scan()
		for c, where := range codes {
			if _, ok := found[c]; !ok {
				found[c] = where
			}
		}
		for _, x := range b {
			if k := fmt.Sprintf("%s:%d %s", x.file, x.line, x.expr); !seen[k] {
				seen[k] = true
				bad = append(bad, x)
			}
		}
	}
	for name, f := range parsed.files {
		if f == nil {
			return nil, nil, fmt.Errorf("%s is built for none of %v: add its system to scanGOOS (or leave it out of the scan if the gateway never builds it)", name, scanGOOS)
		}
	}
	sort.Slice(bad, func(i, j int) bool {
		if bad[i].file != bad[j].file {
			return bad[i].file < bad[j].file
		}
		return bad[i].line < bad[j].line
	})
	return found, bad, nil
}

// parseCache holds the files parsed so far, shared by the scans of each
// system; a file no system has built yet is there as nil.
type parseCache struct {
	fset  *token.FileSet
	files map[string]*ast.File
}

// scanPkg is one type-checked package of the scan.
type scanPkg struct {
	files []*ast.File
	info  *types.Info
	pkg   *types.Package
}

// paramRef places a function's parameter: the function (a *types.Func, or
// the variable a function literal is bound to) and its position.
type paramRef struct {
	callee   types.Object
	index    int
	variadic bool
}

// callSite is one call of a function.
type callSite struct {
	p    *scanPkg
	call *ast.CallExpr
}

// assigned is one value given to a local variable; e is nil when the value
// cannot be followed (a multi-value call, a range, an operator assignment).
type assigned struct {
	p   *scanPkg
	e   ast.Expr
	at  ast.Node
	why string
}

// codeHit is a code and where it was written.
type codeHit struct {
	code  string
	where string
}

// codeScanner is the scan of the module for one system: its packages,
// type-checked, and the indexes eval follows codes through.
type codeScanner struct {
	root, module, goos string
	fset               *token.FileSet
	parsed             *parseCache
	pkgs               map[string]*scanPkg // by import path
	order              []*scanPkg
	checking           map[string]bool

	errType   *types.TypeName // apierror.Error
	codeField *types.Var      // its Code
	params    map[*types.Var]paramRef
	calls     map[types.Object][]callSite
	values    map[types.Object][]ast.Node // uses of a function other than calling it
	assigns   map[*types.Var][]assigned
	litOwner  map[*ast.FuncLit]*types.Var
	owners    map[*types.Var]bool // variables a function literal is bound to
	memo      map[*types.Var]*evalResult
}

// evalResult is what eval found for a variable; done is false while it is
// being followed (a cycle).
type evalResult struct {
	hits []codeHit
	bad  []badCode
	done bool
}

func newCodeScanner(root, module, goos string, dirs []string, parsed *parseCache) (*codeScanner, error) {
	s := &codeScanner{root: root, module: module, goos: goos, fset: parsed.fset, parsed: parsed,
		pkgs: map[string]*scanPkg{}, checking: map[string]bool{},
		params: map[*types.Var]paramRef{}, calls: map[types.Object][]callSite{}, values: map[types.Object][]ast.Node{},
		assigns: map[*types.Var][]assigned{}, litOwner: map[*ast.FuncLit]*types.Var{}, owners: map[*types.Var]bool{}, memo: map[*types.Var]*evalResult{}}
	var pkgDirs []string
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() && (de.Name() == "testdata" || strings.HasPrefix(de.Name(), ".")) {
				return filepath.SkipDir
			}
			if de.IsDir() {
				pkgDirs = append(pkgDirs, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, d := range pkgDirs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		if _, err := s.check(path.Join(module, filepath.ToSlash(rel))); err != nil {
			return nil, err
		}
	}
	ae := s.pkgs[module+"/internal/apierror"]
	if ae == nil || ae.pkg == nil {
		return nil, fmt.Errorf("no package %s/internal/apierror under %s", module, root)
	}
	tn, _ := ae.pkg.Scope().Lookup("Error").(*types.TypeName)
	if tn == nil {
		return nil, fmt.Errorf("apierror has no type Error")
	}
	s.errType = tn
	st, _ := tn.Type().Underlying().(*types.Struct)
	for i := 0; st != nil && i < st.NumFields(); i++ {
		if st.Field(i).Name() == "Code" {
			s.codeField = st.Field(i)
		}
	}
	if s.codeField == nil {
		return nil, fmt.Errorf("apierror.Error has no field Code")
	}
	return s, nil
}

// check parses and type-checks the package at import path ip (in the
// module), and the module's packages it imports. Packages outside the
// module stand in as empty ones: their names are errors, which the scan
// does not need to resolve.
func (s *codeScanner) check(ip string) (*scanPkg, error) {
	if p, ok := s.pkgs[ip]; ok {
		return p, nil
	}
	if s.checking[ip] {
		return nil, fmt.Errorf("import cycle through %s", ip)
	}
	s.checking[ip] = true
	dir := filepath.Join(s.root, filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(ip, s.module), "/")))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = s.goos, "amd64", false
	p := &scanPkg{}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		name := filepath.Join(dir, n)
		if ok, err := ctx.MatchFile(dir, n); err != nil || !ok {
			if _, seen := s.parsed.files[name]; !seen {
				s.parsed.files[name] = nil
			}
			continue
		}
		f := s.parsed.files[name]
		if f == nil {
			if f, err = parser.ParseFile(s.fset, name, nil, parser.SkipObjectResolution); err != nil {
				return nil, err
			}
			s.parsed.files[name] = f
		}
		p.files = append(p.files, f)
	}
	s.pkgs[ip] = p
	if len(p.files) == 0 {
		return p, nil
	}
	p.info = &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
		Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importerFunc(s.importPkg), Error: func(error) {}, FakeImportC: true}
	p.pkg, _ = conf.Check(ip, s.fset, p.files, p.info) // errors from the stand-ins are expected
	s.order = append(s.order, p)
	return p, nil
}

// importerFunc adapts a function to types.Importer.
type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// importPkg returns the module's packages type-checked, and an empty
// stand-in for any other.
func (s *codeScanner) importPkg(ip string) (*types.Package, error) {
	if ip == "unsafe" {
		return types.Unsafe, nil
	}
	if ip == s.module || strings.HasPrefix(ip, s.module+"/") {
		p, err := s.check(ip)
		if err != nil {
			return nil, err
		}
		if p.pkg != nil {
			return p.pkg, nil
		}
	}
	name := path.Base(ip)
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = path.Base(path.Dir(ip)) // go.yaml.in/yaml/v3 is yaml
	}
	stand := types.NewPackage(ip, name)
	stand.MarkComplete()
	return stand, nil
}

// scan indexes the packages and follows every Code to its values.
func (s *codeScanner) scan() (map[string]string, []badCode) {
	for _, p := range s.order {
		s.index(p)
	}
	found := map[string]string{}
	var bad []badCode
	add := func(hits []codeHit, b []badCode) {
		for _, h := range hits {
			if _, ok := found[h.code]; !ok {
				found[h.code] = h.where
			}
		}
		bad = append(bad, b...)
	}
	for _, p := range s.order {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					if e := s.codeInLiteral(p, n); e != nil {
						add(s.eval(p, e))
					}
				case *ast.AssignStmt:
					for i, l := range n.Lhs {
						sel, ok := ast.Unparen(l).(*ast.SelectorExpr)
						if !ok || p.info.Selections[sel] == nil || p.info.Selections[sel].Obj() != s.codeField {
							continue
						}
						if n.Tok != token.ASSIGN || len(n.Rhs) != len(n.Lhs) {
							add(nil, []badCode{s.badAt(p, n, "an operator or multi-value assignment")})
							continue
						}
						add(s.eval(p, n.Rhs[i]))
					}
				}
				return true
			})
		}
	}
	return found, bad
}

// codeInLiteral returns the Code value of an apierror.Error literal.
func (s *codeScanner) codeInLiteral(p *scanPkg, lit *ast.CompositeLit) ast.Expr {
	t := p.info.TypeOf(lit)
	if t == nil {
		return nil
	}
	t = types.Unalias(t)
	if ptr, ok := t.(*types.Pointer); ok {
		t = types.Unalias(ptr.Elem())
	}
	named, ok := t.(*types.Named)
	if !ok || named.Obj() != s.errType {
		return nil
	}
	st := named.Underlying().(*types.Struct)
	for i, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "Code" {
				return kv.Value
			}
			continue
		}
		if i < st.NumFields() && st.Field(i) == s.codeField {
			return el
		}
	}
	return nil
}

// index records, for every package, the parameters of its functions, the
// calls of each function, the other uses of a function (as a value), and
// the values assigned to each local variable.
func (s *codeScanner) index(p *scanPkg) {
	calledAt := map[*ast.Ident]bool{}
	for _, f := range p.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				var id *ast.Ident
				switch fun := ast.Unparen(n.Fun).(type) {
				case *ast.Ident:
					id = fun
				case *ast.SelectorExpr:
					id = fun.Sel
				}
				if id == nil {
					return true
				}
				calledAt[id] = true
				switch o := p.info.Uses[id].(type) {
				case *types.Func:
					s.calls[o.Origin()] = append(s.calls[o.Origin()], callSite{p, n})
				case *types.Var:
					s.calls[o] = append(s.calls[o], callSite{p, n})
				}
			case *ast.FuncDecl:
				if fn, ok := p.info.Defs[n.Name].(*types.Func); ok {
					s.indexParams(p, n.Type, fn)
				}
			case *ast.FuncLit:
				var owner types.Object // nil, not a nil *types.Var, when it is not bound
				if v := s.litOwner[n]; v != nil {
					owner = v
				}
				s.indexParams(p, n.Type, owner)
			case *ast.AssignStmt:
				for i, l := range n.Lhs {
					v := s.localVar(p, l)
					if v == nil {
						continue
					}
					switch {
					case n.Tok != token.ASSIGN && n.Tok != token.DEFINE:
						s.assigns[v] = append(s.assigns[v], assigned{p: p, at: n, why: "an operator assignment"})
					case len(n.Rhs) != len(n.Lhs):
						s.assigns[v] = append(s.assigns[v], assigned{p: p, at: n, why: "a multi-value assignment"})
					default:
						s.assigns[v] = append(s.assigns[v], assigned{p: p, e: n.Rhs[i], at: n.Rhs[i]})
						if lit, ok := ast.Unparen(n.Rhs[i]).(*ast.FuncLit); ok {
							s.litOwner[lit], s.owners[v] = v, true
						}
					}
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					v, _ := p.info.Defs[name].(*types.Var)
					if v == nil {
						continue
					}
					switch {
					case len(n.Values) == 0:
						s.assigns[v] = append(s.assigns[v], assigned{p: p, at: name}) // the zero value: no code
					case len(n.Values) != len(n.Names):
						s.assigns[v] = append(s.assigns[v], assigned{p: p, at: n, why: "a multi-value declaration"})
					default:
						s.assigns[v] = append(s.assigns[v], assigned{p: p, e: n.Values[i], at: n.Values[i]})
						if lit, ok := ast.Unparen(n.Values[i]).(*ast.FuncLit); ok {
							s.litOwner[lit], s.owners[v] = v, true
						}
					}
				}
			case *ast.RangeStmt:
				for _, l := range []ast.Expr{n.Key, n.Value} {
					if v := s.localVar(p, l); v != nil {
						s.assigns[v] = append(s.assigns[v], assigned{p: p, at: l, why: "a range variable"})
					}
				}
			}
			return true
		})
	}
	for id, o := range p.info.Uses {
		if calledAt[id] {
			continue
		}
		switch o := o.(type) {
		case *types.Func:
			s.values[o.Origin()] = append(s.values[o.Origin()], id)
		case *types.Var:
			if s.owners[o] {
				s.values[o] = append(s.values[o], id)
			}
		}
	}
}

// localVar returns the local variable an assignment's left side names.
func (s *codeScanner) localVar(p *scanPkg, l ast.Expr) *types.Var {
	if l == nil {
		return nil
	}
	id, ok := ast.Unparen(l).(*ast.Ident)
	if !ok {
		return nil
	}
	o := p.info.Defs[id]
	if o == nil {
		o = p.info.Uses[id]
	}
	v, _ := o.(*types.Var)
	if v == nil || v.Kind() != types.LocalVar {
		return nil
	}
	return v
}

func (s *codeScanner) indexParams(p *scanPkg, ft *ast.FuncType, callee types.Object) {
	if ft.Params == nil {
		return
	}
	i := 0
	for fi, field := range ft.Params.List {
		_, variadic := field.Type.(*ast.Ellipsis)
		variadic = variadic && fi == len(ft.Params.List)-1
		for _, name := range field.Names {
			if v, ok := p.info.Defs[name].(*types.Var); ok {
				s.params[v] = paramRef{callee: callee, index: i, variadic: variadic}
			}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
}

// eval returns the codes an expression can take, with where each was
// written, and the parts it cannot resolve.
func (s *codeScanner) eval(p *scanPkg, e ast.Expr) ([]codeHit, []badCode) {
	e = ast.Unparen(e)
	if tv, ok := p.info.Types[e]; ok && tv.Value != nil {
		if tv.Value.Kind() == constant.String {
			return []codeHit{{constant.StringVal(tv.Value), s.where(e)}}, nil
		}
		return nil, []badCode{s.badAt(p, e, "a constant that is not a string")}
	}
	id, ok := e.(*ast.Ident)
	if !ok {
		return nil, []badCode{s.badAt(p, e, "an expression computed at run time")}
	}
	v, ok := p.info.Uses[id].(*types.Var)
	if !ok {
		return nil, []badCode{s.badAt(p, e, "a name the scan cannot resolve")}
	}
	switch v.Kind() {
	case types.ParamVar, types.LocalVar:
	default:
		return nil, []badCode{s.badAt(p, e, "a variable that is not local")}
	}
	if r := s.memo[v]; r != nil {
		if !r.done {
			return nil, nil // a cycle: the other path gives the values
		}
		return r.hits, r.bad
	}
	r := &evalResult{}
	s.memo[v] = r
	if v.Kind() == types.ParamVar {
		r.hits, r.bad = s.evalParam(p, e, v)
	} else {
		for _, a := range s.assigns[v] {
			switch {
			case a.e != nil:
				h, b := s.eval(a.p, a.e)
				r.hits, r.bad = append(r.hits, h...), append(r.bad, b...)
			case a.why != "":
				r.bad = append(r.bad, s.badAt(a.p, a.at, a.why))
			}
		}
		if len(s.assigns[v]) == 0 {
			r.bad = append(r.bad, s.badAt(p, e, "a variable whose values the scan cannot find"))
		}
	}
	r.done = true
	return r.hits, r.bad
}

// evalParam follows a parameter to the arguments of every call.
func (s *codeScanner) evalParam(p *scanPkg, e ast.Expr, v *types.Var) (hits []codeHit, bad []badCode) {
	ref, ok := s.params[v]
	if !ok || ref.callee == nil {
		return nil, []badCode{s.badAt(p, e, "a parameter of a function literal that is not bound to a variable")}
	}
	calls := s.calls[ref.callee]
	if vals := s.values[ref.callee]; len(vals) > 0 {
		first := vals[0]
		for _, n := range vals {
			if n.Pos() < first.Pos() {
				first = n
			}
		}
		bad = append(bad, s.badAt(p, e, fmt.Sprintf("a parameter of %s, which is used as a value at %s, where the scan loses its calls", ref.callee.Name(), s.where(first))))
	} else if len(calls) == 0 {
		bad = append(bad, s.badAt(p, e, fmt.Sprintf("a parameter of %s, which nothing calls directly", ref.callee.Name())))
	}
	for _, c := range calls {
		switch {
		case ref.variadic || c.call.Ellipsis.IsValid() && ref.index >= len(c.call.Args)-1:
			bad = append(bad, s.badAt(c.p, c.call, "a variadic argument"))
		case ref.index >= len(c.call.Args):
			bad = append(bad, s.badAt(c.p, c.call, "a call with fewer arguments than parameters"))
		default:
			h, b := s.eval(c.p, c.call.Args[ref.index])
			hits, bad = append(hits, h...), append(bad, b...)
		}
	}
	return hits, bad
}

func (s *codeScanner) where(n ast.Node) string {
	pos := s.fset.Position(n.Pos())
	rel, err := filepath.Rel(s.root, pos.Filename)
	if err != nil {
		rel = pos.Filename
	}
	return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), pos.Line)
}

func (s *codeScanner) badAt(p *scanPkg, n ast.Node, why string) badCode {
	pos, end := s.fset.Position(n.Pos()), s.fset.Position(n.End())
	rel, err := filepath.Rel(s.root, pos.Filename)
	if err != nil {
		rel = pos.Filename
	}
	expr := "?"
	if src, err := os.ReadFile(pos.Filename); err == nil && end.Offset <= len(src) {
		expr = strings.Join(strings.Fields(string(src[pos.Offset:end.Offset])), " ")
	}
	return badCode{file: filepath.ToSlash(rel), line: pos.Line, expr: expr, why: why}
}

// TestTroubleshootingCheck_FollowsCodesThroughHelpers proves the scan finds codes
// where the gateway writes them (literals, constants of its own or another
// package, helpers and closures that pass a code on, local variables, the
// Code field set by assignment, files built for one system only), ignores
// other types' Code fields, and reports a code made at run time.
func TestTroubleshootingCheck_FollowsCodesThroughHelpers(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"internal/apierror/apierror.go": `package apierror

const CodeShared = "shared_const"

type Error struct {
	Status int
	Code   string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func New(status int, code, msg string) *Error { return &Error{Status: status, Code: code, Msg: msg} }

func Bad(code string) *Error { return New(400, code, "bad") }

var ErrGone = &Error{499, "positional", "gone"}
`,
		"internal/a/a.go": `package a

import (
	"fmt"
	"net/http"

	ae "x/internal/apierror"
)

type other struct{ Code string }

func refuse(code string) error { return ae.New(http.StatusUnauthorized, code, "no") }

func outer(c string) error { return refuse(c) }

func asValue(code string) error { return ae.New(500, code, "") }

func pick() string { return "picked" }

func F(x int, name string) []error {
	mk := func(code string, args ...any) *ae.Error { return ae.New(502, code, fmt.Sprint(args...)) }
	var code string
	switch x {
	case 1:
		code = "switch_a"
	default:
		code = "switch_b"
	}
	status, c2 := 404, "tuple_code"
	e := ae.New(status, "before", "")
	e.Code = "assigned_code"
	e.Status, e.Code = 429, "tuple_assigned"
	o := other{Code: "not_a_code"}
	o.Code = "also_not"
	f := asValue
	return []error{
		ae.New(400, "lit_code", "m"), ae.New(400, pkgConst, ""), ae.New(400, ae.CodeShared, ""),
		ae.New(400, prefix+"suffix", ""), ae.Bad("via_bad"), refuse("helper_code"), outer("outer_code"),
		mk("closure_code", 1), ae.New(400, code, ""), ae.New(400, c2, ""), e,
		&ae.Error{Code: "literal_field"}, ae.New(400, "invalid_"+name, ""), ae.New(400, pick(), ""), f("x"),
	}
}
`,
		"internal/a/consts.go":      "package a\n\nconst (\n\tpkgConst = \"pkg_const\"\n\tprefix   = \"prefix_\"\n)\n",
		"internal/a/sys_windows.go": "package a\n\nimport \"x/internal/apierror\"\n\nfunc sys() error { return apierror.New(503, \"windows_code\", \"\") }\n",
		"internal/a/sys_linux.go":   "package a\n\nimport \"x/internal/apierror\"\n\nfunc sys() error { return apierror.New(503, \"linux_code\", \"\") }\n",
		"internal/a/a_test.go":      "package a\n\nimport \"x/internal/apierror\"\n\nvar _ = apierror.New(0, \"test_only\", \"\")\n",
	}
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, bad, err := scanErrorCodes(root, "x", []string{"internal"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for c := range found {
		got = append(got, c)
	}
	sort.Strings(got)
	want := []string{"assigned_code", "before", "closure_code", "helper_code", "linux_code", "lit_code", "literal_field",
		"outer_code", "pkg_const", "positional", "prefix_suffix", "shared_const", "switch_a", "switch_b", "tuple_assigned",
		"tuple_code", "via_bad", "windows_code"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("codes:\n got %v\nwant %v", got, want)
	}
	got = nil
	for _, b := range bad {
		got = append(got, fmt.Sprintf("%s:%d %s", b.file, b.line, b.expr))
	}
	want = []string{
		`internal/a/a.go:16 code`, // asValue is called through f
		`internal/a/a.go:40 "invalid_"+name`,
		`internal/a/a.go:40 pick()`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unresolved:\n got %q\nwant %q", got, want)
	}
	if found["helper_code"] != "internal/a/a.go:38" {
		t.Errorf("helper_code is placed at %s, want internal/a/a.go:38 (the call that names it)", found["helper_code"])
	}
}

// TestTroubleshootingCheck_CatchesIndexDrift proves the index check fails
// on a code without a row, a row without a code, rows out of order or
// twice, and a row that does not name one code.
func TestTroubleshootingCheck_CatchesIndexDrift(t *testing.T) {
	md := "# T\n\n## Every error code\n\n| code | status | means | do |\n|---|---|---|---|\n" +
		"| `b_code` | 400 | b | x |\n| `a_code` | 400 | a | x |\n| `a_code` | 400 | a | x |\n| `gone_code` | 400 | g | x |\n\n## Next\n\n| `not_indexed` | x |\n"
	index, err := codeIndex(md)
	if err != nil {
		t.Fatal(err)
	}
	got := indexProblems(map[string]string{"a_code": "a.go:1", "b_code": "b.go:2", "new_code": "n.go:3"}, index)
	want := []string{
		`docs/troubleshooting.md: "a_code" is out of order in "Every error code" (after "b_code"): keep the rows sorted`,
		`docs/troubleshooting.md: "a_code" has two rows in "Every error code"`,
		`docs/troubleshooting.md: "gone_code" in "Every error code" is no error code the source makes: remove its row, or fix its name`,
		`error code "new_code" (n.go:3) has no row in docs/troubleshooting.md's "Every error code": add one saying what it means and what to do`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := codeIndex(strings.Replace(md, "| `gone_code` |", "| `gone_code`, `other` |", 1)); err == nil {
		t.Error("a row naming two codes was taken")
	}
	if _, err := codeIndex("# T\n"); err == nil {
		t.Error("a doc without the index was taken")
	}
}
