// Tokenizer of the Jinja subset (server/text/jinja.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tq::jinja {

/// One lexical token. Template text between tags is one kText token (after
/// whitespace control); tags are kVarBegin/kBlockBegin, expression tokens,
/// then kVarEnd/kBlockEnd. Comments produce no tokens.
struct Token {
  enum class Type {
    kText,
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // text holds the decoded value (escapes applied)
    kInt,         // text holds the digits (underscores removed)
    kFloat,
    kOp,  // operator or punctuation: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
    kEof,
  };
  Type type;
  std::string text;
  int line;  // 1-based line of the token's start in the template
};

/// Whitespace options of jinja2.Environment. The defaults are what Hugging
/// Face transformers renders chat templates with (trim_blocks=True,
/// lstrip_blocks=True, keep_trailing_newline=False).
struct LexOptions {
  bool trim_blocks = true;             // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;           // drop spaces/tabs before a block or comment tag on its line
  bool keep_trailing_newline = false;  // else one final newline of the template is dropped
};

/// Splits `source` into tokens as jinja2's lexer (jinja2/lexer.py) does:
/// newlines normalized to "\n", `{%-`/`-%}`/`{{-`/`-}}`/`{#-`/`-#}` strip
/// whitespace, `{%+`/`+%}` disable lstrip/trim, tag ends are recognized only
/// outside brackets. Throws tq::Error "line N: ..." on an unterminated tag,
/// comment or string, or an unexpected character.
std::vector<Token> Lex(std::string_view source, const LexOptions& options = {});

}  // namespace tq::jinja
