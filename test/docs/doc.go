// Package docs tests the repository's Markdown as a reader on GitHub follows it: every relative
// link of every page names a file that exists, and every #fragment a heading (or anchor) of
// that page. External links are not fetched.
package docs
