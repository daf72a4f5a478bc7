// Package structured is Tandem's constrained decoder: it compiles a JSON
// Schema, a generic JSON object, a regular expression, a choice among strings
// or a GBNF grammar into a byte-level pushdown automaton, and walks a model's
// vocabulary (token byte strings, handed in by the caller: this package
// imports no tokenizer) against it to give, at each decoding step, the
// bitmask of token ids that keep the output inside the language.
//
// Design:
//   - A grammar is a set of rules over byte sets (grammar.go). Its parser
//     state is a set of interned stacks of return positions; right
//     recursion is a tail call, so repetition does not grow the stack
//     (pda.go).
//   - Stack sets are the states of a lazily built DFA over bytes: each
//     state's transitions are filled in as the vocabulary walk needs them and
//     kept, so a byte step is an array lookup once seen.
//   - The vocabulary is held as tries laid out in preorder (vocab.go): the
//     walk shares prefixes and skips a dead prefix's whole subtree. A
//     token that spans a grammar boundary (`"}`, `",\n  "`) is just more
//     bytes through the same automaton, so it is allowed exactly when all
//     its bytes are.
//   - A state's mask is split at '"' (the xgrammar idea of
//     context-independent tokens, in DFA terms). The states reachable
//     from it on every other byte form its shape: a small table, the same
//     for every string's contents and for JSON punctuation whatever the
//     schema position. The tokens without '"' (nearly all) are allowed
//     exactly when they pass through the shape, so their mask is cached
//     per shape and vocabulary, shared by every grammar; only the tokens
//     holding '"' (few) are walked against the whole
//     automaton, and a state whose shape is too large gets the whole walk.
//     A shared mask plus the '"' tokens a state adds is itself cached per
//     vocabulary (the pair recurs across positions and grammars).
//   - Masks are also cached per DFA state, so a state the grammar
//     revisits costs a lookup. The automaton's states are interned by a
//     hash of their stack sets, each frame's closure is computed once, and
//     transitions live in fixed pages, so a new state costs no copy of
//     the table.
//   - EOS is allowed only in an accepting state; tokens with no bytes
//     (control tokens) never are.
//
// Schemas are compiled to a subset of what they accept that is cheap and
// short to generate: no whitespace but one optional space after ':' and ',',
// properties in schema order, integers of at most 15 digits, no exponents.
// Every output the automaton allows validates against the schema; a
// keyword the compiler cannot honour is refused by name before any token is
// generated (UnsupportedError), and a schema that accepts nothing is refused
// too.
package structured
