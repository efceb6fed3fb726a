// Package docs holds the code of every Go snippet in the repository's README.md and in
// docs/*.md, so that the compiler checks it against today's API; its tests check that each
// snippet is, line for line, a region of a file of this package, and that the pages' links work.
// Nothing here is meant to be imported.
package docs
