// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// Lexer, parser, type checker and code generator of the staged-potential language.
// coda_core_cpp/reference.py mirrors this file rule for rule (same errors, same positions).
// One translation unit of about 730 lines on purpose: the lexer, parser, type checker and code generator share
// the token, node and layout types of its anonymous namespace, which no other file may see.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coda_core/potential.hpp"
#include "coda_core/potential_ops.hpp"

namespace coda_core {

PotentialError::PotentialError(int line, int column, const std::string& message)
    : std::runtime_error("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message),
      line_(line),
      column_(column),
      message_(message) {}

namespace {

using namespace pot;  // NOLINT

enum class Tok { kNumber, kIdent, kKeyword, kOp, kNewline, kEnd };

struct Token {
  Tok kind;
  std::string text;
  int line, col;
  std::size_t begin, end;  // byte span in the source
  float value = 0.0f;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
bool is_keyword(const std::string& s) { return s == "stage" || s == "and" || s == "or" || s == "not"; }

std::string show_char(unsigned char c) {
  if (c >= 0x21 && c <= 0x7e) return std::string("'") + static_cast<char>(c) + "'";
  char buf[8];
  std::snprintf(buf, sizeof(buf), "'\\x%02x'", c);
  return buf;
}

// Offset of the first byte in [begin, end) that does not start a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF; a sequence cut by `end` is not well-formed); `end` if none.
std::size_t first_invalid_utf8(const std::string& s, std::size_t begin, std::size_t end) {
  std::size_t i = begin;
  while (i < end) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (end - i < len) return i;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      const auto ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return i;
    }
    i += len;
  }
  return end;
}

std::string describe(const Token& t) {
  if (t.kind == Tok::kNewline) return "end of line";
  if (t.kind == Tok::kEnd) return "end of input";
  return "'" + t.text + "'";
}

std::vector<Token> lex(const std::string& src) {
  std::vector<Token> toks;
  const std::size_t n = src.size();
  std::size_t i = 0;
  int line = 1, col = 1, depth = 0;
  while (i < n) {
    const char c = src[i];
    if (c == '\n') {
      if (depth == 0 && !toks.empty() && toks.back().kind != Tok::kNewline) {
        toks.push_back({Tok::kNewline, "\n", line, col, i, i + 1});
      }
      ++i;
      ++line;
      col = 1;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      ++col;
      continue;
    }
    if (c == '#') {
      // A comment may hold any text, but text: bytes that are not UTF-8 (lone surrogates) are an error.
      std::size_t end = src.find('\n', i);
      if (end == std::string::npos) end = n;
      const std::size_t bad = first_invalid_utf8(src, i, end);
      if (bad != end) {
        throw PotentialError(line, col + static_cast<int>(bad - i),
                             "invalid UTF-8 byte " + show_char(static_cast<unsigned char>(src[bad])) + " in a comment");
      }
      col += static_cast<int>(end - i);
      i = end;
      continue;
    }
    const std::size_t start = i;
    const int scol = col;
    if (is_digit(c) || (c == '.' && i + 1 < n && is_digit(src[i + 1]))) {
      while (i < n && is_digit(src[i])) ++i;
      if (i < n && src[i] == '.') {
        ++i;
        while (i < n && is_digit(src[i])) ++i;
      }
      if (i < n && (src[i] == 'e' || src[i] == 'E')) {
        std::size_t j = i + 1;
        if (j < n && (src[j] == '+' || src[j] == '-')) ++j;
        if (j < n && is_digit(src[j])) {
          i = j;
          while (i < n && is_digit(src[i])) ++i;
        } else {
          throw PotentialError(line, scol, "malformed number '" + src.substr(start, j - start) + "'");
        }
      }
      std::string text = src.substr(start, i - start);
      const double d = std::strtod(text.c_str(), nullptr);
      const float f = static_cast<float>(d);
      if (!std::isfinite(f)) throw PotentialError(line, scol, "number out of range: '" + text + "'");
      Token t{Tok::kNumber, text, line, scol, start, i};
      t.value = f;
      toks.push_back(t);
      col += static_cast<int>(i - start);
      continue;
    }
    if (is_ident_start(c)) {
      while (i < n && is_ident_char(src[i])) ++i;
      std::string text = src.substr(start, i - start);
      const Tok kind = is_keyword(text) ? Tok::kKeyword : Tok::kIdent;
      toks.push_back({kind, text, line, scol, start, i});
      col += static_cast<int>(i - start);
      continue;
    }
    if (i + 1 < n && src[i + 1] == '=' && (c == '=' || c == '!' || c == '<' || c == '>')) {
      toks.push_back({Tok::kOp, src.substr(i, 2), line, scol, i, i + 2});
      i += 2;
      col += 2;
      continue;
    }
    static const std::string singles = "+-*/(),.:=<>";
    if (singles.find(c) != std::string::npos) {
      if (c == '(') ++depth;
      if (c == ')' && depth > 0) --depth;
      toks.push_back({Tok::kOp, std::string(1, c), line, scol, i, i + 1});
      ++i;
      ++col;
      continue;
    }
    throw PotentialError(line, col, "unexpected character " + show_char(static_cast<unsigned char>(c)));
  }
  if (!toks.empty() && toks.back().kind != Tok::kNewline) toks.push_back({Tok::kNewline, "", line, col, n, n});
  toks.push_back({Tok::kEnd, "", line, col, n, n});
  return toks;
}

enum class Type { kScalar = 1, kVec2 = 2, kVec3 = 3 };
int width(Type t) { return static_cast<int>(t); }
const char* type_name(Type t) { return t == Type::kScalar ? "scalar" : (t == Type::kVec2 ? "vec2" : "vec3"); }

enum class Kind { kNum, kLoad, kNeg, kBinary, kNot, kComponent, kCall };

struct Node {
  Kind kind;
  Type type;
  int depth;
  std::string op;  // operator or function name
  std::vector<int> kids;
  float value = 0.0f;
  int offset = 0;  // kLoad offset, kComponent index
};

struct Func {
  int arity;  // -2: two or more
};

const std::map<std::string, Func>& functions() {
  static const std::map<std::string, Func> f = {{"dist", {2}}, {"dist_xy", {2}}, {"norm", {1}}, {"abs", {1}},
                                                {"exp", {1}},  {"clip", {3}},    {"min", {-2}}, {"max", {-2}}};
  return f;
}

struct LayoutSlot {
  int offset;
  Type type;
};

class Parser {
 public:
  Parser(const std::string& src, std::vector<Token> toks, const std::map<std::string, LayoutSlot>& layout,
         const PotentialLimits& limits)
      : src_(src), toks_(std::move(toks)), layout_(layout), limits_(limits) {}

  struct ParsedExpr {
    int root;
    std::string source;
  };
  struct ParsedStage {
    std::string name;
    ParsedExpr progress, done;
  };

  std::vector<ParsedStage> parse_program() {
    std::vector<ParsedStage> stages;
    std::set<std::string> names;
    if (tok().kind == Tok::kEnd) fail(tok(), "the program has no stages");
    while (tok().kind != Tok::kEnd) {
      if (!is_kw("stage")) fail(tok(), "expected 'stage', got " + describe(tok()));
      const Token& stage_tok = tok();
      if (static_cast<int>(stages.size()) >= limits_.max_stages) {
        fail(stage_tok, "too many stages (the limit is " + std::to_string(limits_.max_stages) + ")");
      }
      advance();
      if (tok().kind != Tok::kIdent) fail(tok(), "expected a stage name after 'stage', got " + describe(tok()));
      const Token name_tok = tok();
      if (names.count(name_tok.text)) fail(name_tok, "duplicate stage name '" + name_tok.text + "'");
      names.insert(name_tok.text);
      advance();
      expect_op(":", "after the stage name");
      if (tok().kind != Tok::kNewline) fail(tok(), "expected end of line after ':', got " + describe(tok()));
      advance();
      ParsedStage st;
      st.name = name_tok.text;
      bool has_progress = false, has_done = false;
      while (tok().kind == Tok::kIdent && (tok().text == "progress" || tok().text == "done")) {
        const Token field = tok();
        advance();
        expect_op("=", "after '" + field.text + "'");
        bool& seen = field.text == "progress" ? has_progress : has_done;
        if (seen) fail(field, "duplicate '" + field.text + "' in stage '" + st.name + "'");
        seen = true;
        const Token first = tok();
        const int root = parse_or(0);
        if (nodes_[root].type != Type::kScalar) {
          fail(first, "'" + field.text + "' must be a scalar, got " + type_name(nodes_[root].type));
        }
        const std::size_t end = toks_[pos_ - 1].end;
        if (tok().kind != Tok::kNewline) fail(tok(), "expected end of line, got " + describe(tok()));
        advance();
        ParsedExpr e{root, src_.substr(first.begin, end - first.begin)};
        (field.text == "progress" ? st.progress : st.done) = e;
      }
      if (tok().kind != Tok::kEnd && !is_kw("stage")) {
        fail(tok(), "expected 'progress', 'done' or a new 'stage', got " + describe(tok()));
      }
      if (!has_progress) fail(name_tok, "stage '" + st.name + "' has no 'progress'");
      if (!has_done) fail(name_tok, "stage '" + st.name + "' has no 'done'");
      stages.push_back(st);
    }
    return stages;
  }

  const std::vector<Node>& nodes() const { return nodes_; }

 private:
  const Token& tok() const { return toks_[pos_]; }
  const Token& peek() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_kw(const char* s) const { return tok().kind == Tok::kKeyword && tok().text == s; }
  bool is_op(const char* s) const { return tok().kind == Tok::kOp && tok().text == s; }
  [[noreturn]] void fail(const Token& t, const std::string& msg) const { throw PotentialError(t.line, t.col, msg); }
  void expect_op(const char* s, const std::string& where) {
    if (!is_op(s)) fail(tok(), std::string("expected '") + s + "' " + where + ", got " + describe(tok()));
    advance();
  }
  void check_depth(int d, const Token& at) const {
    if (d > limits_.max_depth) {
      fail(at, "expression is nested too deeply (the limit is " + std::to_string(limits_.max_depth) + ")");
    }
  }
  int add(const Token& at, Node n) {
    int d = 0;
    for (int k : n.kids) d = std::max(d, nodes_[k].depth);
    n.depth = d + 1;
    check_depth(n.depth, at);
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }
  Type type_of(int i) const { return nodes_[i].type; }

  int parse_or(int d) {
    int left = parse_and(d);
    while (is_kw("or")) {
      const Token op = tok();
      advance();
      const int right = parse_and(d);
      left = logic(op, left, right);
    }
    return left;
  }
  int parse_and(int d) {
    int left = parse_not(d);
    while (is_kw("and")) {
      const Token op = tok();
      advance();
      const int right = parse_not(d);
      left = logic(op, left, right);
    }
    return left;
  }
  int logic(const Token& op, int l, int r) {
    if (type_of(l) != Type::kScalar || type_of(r) != Type::kScalar) {
      fail(op, "type mismatch: '" + op.text + "' needs scalars, got " + type_name(type_of(l)) + " and " +
                   type_name(type_of(r)));
    }
    return add(op, Node{Kind::kBinary, Type::kScalar, 0, op.text, {l, r}});
  }
  int parse_not(int d) {
    if (is_kw("not")) {
      const Token op = tok();
      check_depth(d + 1, op);
      advance();
      const int child = parse_not(d + 1);
      if (type_of(child) != Type::kScalar) {
        fail(op, std::string("type mismatch: 'not' needs a scalar, got ") + type_name(type_of(child)));
      }
      return add(op, Node{Kind::kNot, Type::kScalar, 0, "not", {child}});
    }
    return parse_cmp(d);
  }
  bool at_comparison() const {
    return tok().kind == Tok::kOp && (tok().text == "<" || tok().text == "<=" || tok().text == ">" ||
                                      tok().text == ">=" || tok().text == "==" || tok().text == "!=");
  }
  int parse_cmp(int d) {
    const int left = parse_sum(d);
    if (!at_comparison()) return left;
    const Token op = tok();
    advance();
    const int right = parse_sum(d);
    if (type_of(left) != Type::kScalar || type_of(right) != Type::kScalar) {
      fail(op, "type mismatch: '" + op.text + "' needs scalars, got " + type_name(type_of(left)) + " and " +
                   type_name(type_of(right)));
    }
    const int node = add(op, Node{Kind::kBinary, Type::kScalar, 0, op.text, {left, right}});
    if (at_comparison()) fail(tok(), "comparisons cannot be chained; combine them with 'and'");
    return node;
  }
  int parse_sum(int d) {
    int left = parse_term(d);
    while (is_op("+") || is_op("-")) {
      const Token op = tok();
      advance();
      const int right = parse_term(d);
      left = arith(op, left, right);
    }
    return left;
  }
  int parse_term(int d) {
    int left = parse_unary(d);
    while (is_op("*") || is_op("/")) {
      const Token op = tok();
      advance();
      const int right = parse_unary(d);
      left = arith(op, left, right);
    }
    return left;
  }
  int arith(const Token& op, int l, int r) {
    const Type lt = type_of(l), rt = type_of(r);
    Type result = lt;
    const std::string pair = std::string(type_name(lt)) + " and " + type_name(rt);
    if (op.text == "+" || op.text == "-") {
      if (lt != rt) fail(op, std::string("type mismatch: cannot ") + (op.text == "+" ? "add " : "subtract ") + pair);
    } else if (op.text == "*") {
      if (lt != Type::kScalar && rt != Type::kScalar) fail(op, "type mismatch: cannot multiply " + pair);
      result = lt == Type::kScalar ? rt : lt;
    } else if (rt != Type::kScalar) {
      fail(op, std::string("type mismatch: cannot divide ") + type_name(lt) + " by " + type_name(rt));
    }
    return add(op, Node{Kind::kBinary, result, 0, op.text, {l, r}});
  }
  int parse_unary(int d) {
    if (is_op("-") || is_op("+")) {
      const Token op = tok();
      check_depth(d + 1, op);
      advance();
      const int child = parse_unary(d + 1);
      if (op.text == "+") return child;
      return add(op, Node{Kind::kNeg, type_of(child), 0, "-", {child}});
    }
    return parse_postfix(d);
  }
  int parse_postfix(int d) {
    int node = parse_primary(d);
    while (is_op(".")) {
      const Token dot = tok();
      advance();
      if (tok().kind != Tok::kIdent) fail(tok(), "expected a component name after '.', got " + describe(tok()));
      const Token comp = tok();
      int idx = -1;
      if (comp.text == "x") idx = 0;
      if (comp.text == "y") idx = 1;
      if (comp.text == "z") idx = 2;
      if (idx < 0) fail(comp, "unknown component '." + comp.text + "' (use .x, .y or .z)");
      const Type t = type_of(node);
      if (t == Type::kScalar) fail(dot, "type mismatch: '." + comp.text + "' needs a vector, got scalar");
      if (idx >= width(t)) fail(dot, "type mismatch: '." + comp.text + "' on a vec2 (it has only .x and .y)");
      advance();
      Node n{Kind::kComponent, Type::kScalar, 0, ".", {node}};
      n.offset = idx;
      node = add(dot, n);
    }
    return node;
  }
  int parse_primary(int d) {
    const Token t = tok();
    if (t.kind == Tok::kNumber) {
      advance();
      Node n{Kind::kNum, Type::kScalar, 0, "", {}};
      n.value = t.value;
      return add(t, n);
    }
    if (t.kind == Tok::kIdent && peek().kind == Tok::kOp && peek().text == "(") return parse_call(d);
    if (t.kind == Tok::kIdent) {
      auto it = layout_.find(t.text);
      if (it == layout_.end()) fail(t, "unknown name '" + t.text + "'");
      advance();
      Node n{Kind::kLoad, it->second.type, 0, t.text, {}};
      n.offset = it->second.offset;
      return add(t, n);
    }
    if (t.kind == Tok::kOp && t.text == "(") {
      check_depth(d + 1, t);
      advance();
      const int inner = parse_or(d + 1);
      if (!is_op(")")) fail(tok(), "expected ')', got " + describe(tok()));
      advance();
      return inner;
    }
    fail(t, "expected an expression, got " + describe(t));
  }
  int parse_call(int d) {
    const Token name = tok();
    auto it = functions().find(name.text);
    if (it == functions().end()) fail(name, "unknown function '" + name.text + "'");
    advance();
    check_depth(d + 1, tok());
    advance();  // '('
    std::vector<int> args;
    std::vector<Token> arg_toks;
    if (is_op(")")) {
      advance();
    } else {
      while (true) {
        arg_toks.push_back(tok());
        args.push_back(parse_or(d + 1));
        if (is_op(")")) {
          advance();
          break;
        }
        if (is_op(",")) {
          advance();
          continue;
        }
        fail(tok(), "expected ',' or ')', got " + describe(tok()));
      }
    }
    const int arity = it->second.arity;
    const int got = static_cast<int>(args.size());
    if (arity > 0 && got != arity) {
      fail(name, "'" + name.text + "' takes " + std::to_string(arity) + (arity == 1 ? " argument" : " arguments") +
                     ", got " + std::to_string(got));
    }
    if (arity == -2 && got < 2) {
      fail(name, "'" + name.text + "' takes at least 2 arguments, got " + std::to_string(got));
    }
    const bool wants_vectors = name.text == "dist" || name.text == "dist_xy" || name.text == "norm";
    for (int k = 0; k < got; ++k) {
      const Type t = type_of(args[k]);
      if (wants_vectors && t == Type::kScalar) {
        fail(arg_toks[k], "'" + name.text + "' argument " + std::to_string(k + 1) + " must be a vector, got scalar");
      }
      if (!wants_vectors && t != Type::kScalar) {
        fail(arg_toks[k], "'" + name.text + "' argument " + std::to_string(k + 1) + " must be a scalar, got " +
                              type_name(t));
      }
    }
    if (name.text == "dist" && type_of(args[0]) != type_of(args[1])) {
      fail(name, std::string("'dist' arguments must have the same length, got ") + type_name(type_of(args[0])) +
                     " and " + type_name(type_of(args[1])));
    }
    return add(name, Node{Kind::kCall, Type::kScalar, 0, name.text, args});
  }

  const std::string& src_;
  std::vector<Token> toks_;
  std::size_t pos_ = 0;
  const std::map<std::string, LayoutSlot>& layout_;
  PotentialLimits limits_;
  std::vector<Node> nodes_;
};

// Code generation to scalarised register code. Leaves (numbers, layout names) and vector
// components are register references, not instructions. Operands are first emitted with
// symbolic indices (temporary k, constant k | kConstTag, slot k | kSlotTag) and relocated once
// the number of temporaries is known.
//
// emit(node, sp) returns the locations of the node's components and the first free temporary.
// Temporaries produced for component j of a value emitted at sp always sit at or above sp + j,
// so writing component i's result to sp + i (in increasing i) never clobbers an operand that is
// still to be read; the one exception (a scalar temporary broadcast over a vector) writes
// above that scalar instead.
constexpr std::uint32_t kConstTag = 1u << 30, kSlotTag = 2u << 30, kTagMask = 3u << 30;

struct Emitted {
  std::vector<std::uint32_t> loc;
  std::uint32_t top;
};

class CodeGen {
 public:
  explicit CodeGen(const std::vector<Node>& nodes) : nodes_(nodes) {}

  PotentialExprCode compile(int root) {
    code_.clear();
    const Emitted e = emit(root, 0);
    PotentialExprCode out;
    out.code = code_;
    out.result = e.loc[0];
    return out;
  }
  std::uint32_t num_temps() const { return max_temp_; }
  const std::vector<float>& constants() const { return constants_; }
  const std::vector<std::int64_t>& slots() const { return slots_; }

 private:
  static bool is_temp(std::uint32_t r) { return (r & kTagMask) == 0; }
  std::uint32_t constant(float v) {
    for (std::size_t i = 0; i < constants_.size(); ++i) {
      if (std::memcmp(&constants_[i], &v, sizeof(float)) == 0) return kConstTag | static_cast<std::uint32_t>(i);
    }
    constants_.push_back(v);
    return kConstTag | static_cast<std::uint32_t>(constants_.size() - 1);
  }
  std::uint32_t slot(std::int64_t index) {
    auto it = slot_of_.find(index);
    if (it != slot_of_.end()) return it->second;
    const std::uint32_t r = kSlotTag | static_cast<std::uint32_t>(slots_.size());
    slots_.push_back(index);
    slot_of_[index] = r;
    return r;
  }
  void put(Op op, std::uint32_t dst, std::uint32_t a, std::uint32_t b = 0) {
    max_temp_ = std::max(max_temp_, dst + 1);
    code_.push_back(PotentialInstr{op, dst, a, b});
  }
  static Op binary_op(const std::string& s) {
    if (s == "+") return kAdd;
    if (s == "-") return kSub;
    if (s == "*") return kMul;
    if (s == "/") return kDiv;
    if (s == "<") return kLt;
    if (s == "<=") return kLe;
    if (s == ">") return kGt;
    if (s == ">=") return kGe;
    if (s == "==") return kEq;
    if (s == "!=") return kNe;
    if (s == "and") return kAnd;
    return kOr;
  }
  // sqrt of the sum of squares of the w values at `v`, summed left to right; result in sp.
  Emitted norm_of(const std::vector<std::uint32_t>& v, std::uint32_t sp, std::uint32_t top) {
    const std::size_t w = v.size();
    for (std::size_t i = 0; i < w; ++i) put(kMul, sp + static_cast<std::uint32_t>(i), v[i], v[i]);
    for (std::size_t i = 1; i < w; ++i) put(kAdd, sp, sp, sp + static_cast<std::uint32_t>(i));
    put(kSqrt, sp, sp);
    return {{sp}, std::max<std::uint32_t>(top, sp + static_cast<std::uint32_t>(w))};
  }
  Emitted emit(int idx, std::uint32_t sp) {
    const Node& n = nodes_[idx];
    switch (n.kind) {
      case Kind::kNum:
        return {{constant(n.value)}, sp};
      case Kind::kLoad: {
        Emitted e{{}, sp};
        for (int i = 0; i < width(n.type); ++i) e.loc.push_back(slot(n.offset + i));
        return e;
      }
      case Kind::kNeg: {
        const Emitted c = emit(n.kids[0], sp);
        Emitted e{{}, std::max<std::uint32_t>(c.top, sp + static_cast<std::uint32_t>(c.loc.size()))};
        for (std::uint32_t i = 0; i < c.loc.size(); ++i) {
          put(kNeg, sp + i, c.loc[i]);
          e.loc.push_back(sp + i);
        }
        return e;
      }
      case Kind::kNot: {
        const Emitted c = emit(n.kids[0], sp);
        put(kNot, sp, c.loc[0]);
        return {{sp}, std::max(c.top, sp + 1)};
      }
      case Kind::kComponent: {
        const Emitted c = emit(n.kids[0], sp);
        return {{c.loc[static_cast<std::size_t>(n.offset)]}, c.top};
      }
      case Kind::kBinary: {
        const Emitted l = emit(n.kids[0], sp);
        const Emitted r = emit(n.kids[1], l.top);
        const Op op = binary_op(n.op);
        const std::size_t wl = l.loc.size(), wr = r.loc.size(), w = std::max(wl, wr);
        // A scalar temporary broadcast over a vector must survive the whole loop: write above it.
        std::uint32_t base = sp;
        if (wl == 1 && wr > 1 && is_temp(l.loc[0])) base = l.loc[0] + 1;
        if (wr == 1 && wl > 1 && is_temp(r.loc[0])) base = r.loc[0] + 1;
        Emitted e{{}, 0};
        for (std::uint32_t i = 0; i < w; ++i) {
          const std::uint32_t a = l.loc[wl == 1 ? 0 : i], b = r.loc[wr == 1 ? 0 : i];
          put(op, base + i, a, b);
          e.loc.push_back(base + i);
        }
        e.top = std::max<std::uint32_t>(r.top, base + static_cast<std::uint32_t>(w));
        return e;
      }
      case Kind::kCall:
        return emit_call(n, sp);
    }
    return {{sp}, sp};
  }
  Emitted emit_call(const Node& n, std::uint32_t sp) {
    const std::string& f = n.op;
    if (f == "dist" || f == "dist_xy") {
      const Emitted a = emit(n.kids[0], sp);
      const Emitted b = emit(n.kids[1], a.top);
      const std::uint32_t w = f == "dist" ? static_cast<std::uint32_t>(a.loc.size()) : 2;
      std::vector<std::uint32_t> diff;
      for (std::uint32_t i = 0; i < w; ++i) {
        put(kSub, sp + i, a.loc[i], b.loc[i]);
        diff.push_back(sp + i);
      }
      return norm_of(diff, sp, b.top);
    }
    if (f == "norm") {
      const Emitted v = emit(n.kids[0], sp);
      return norm_of(v.loc, sp, v.top);
    }
    if (f == "abs" || f == "exp") {
      const Emitted x = emit(n.kids[0], sp);
      put(f == "abs" ? kAbs : kExp, sp, x.loc[0]);
      return {{sp}, std::max(x.top, sp + 1)};
    }
    if (f == "clip") {
      const Emitted x = emit(n.kids[0], sp);
      const Emitted lo = emit(n.kids[1], x.top);
      put(kMax, sp, x.loc[0], lo.loc[0]);
      const Emitted hi = emit(n.kids[2], sp + 1);
      put(kMin, sp, sp, hi.loc[0]);
      return {{sp}, std::max({lo.top, hi.top, sp + 1})};
    }
    // min / max, folded left
    const Op op = f == "min" ? kMin : kMax;
    const Emitted first = emit(n.kids[0], sp);
    std::uint32_t acc = first.loc[0], top = std::max(first.top, sp + 1);
    const std::uint32_t next_sp = top;  // above the first value, wherever it was left
    for (std::size_t k = 1; k < n.kids.size(); ++k) {
      const Emitted next = emit(n.kids[k], next_sp);
      put(op, sp, acc, next.loc[0]);
      acc = sp;
      top = std::max(top, next.top);
    }
    return {{sp}, top};
  }

  const std::vector<Node>& nodes_;
  std::vector<PotentialInstr> code_;
  std::uint32_t max_temp_ = 0;
  std::vector<float> constants_;
  std::vector<std::int64_t> slots_;
  std::map<std::int64_t, std::uint32_t> slot_of_;
};

bool valid_identifier(const std::string& s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  return std::all_of(s.begin(), s.end(), is_ident_char);
}

}  // namespace

PotentialProgram PotentialProgram::compile(const std::string& source, const std::vector<LayoutEntry>& layout,
                                           const PotentialLimits& limits) {
  std::map<std::string, LayoutSlot> slots;
  std::size_t required = 0;
  for (const LayoutEntry& e : layout) {
    if (!valid_identifier(e.name) || is_keyword(e.name)) {
      throw std::invalid_argument("layout: '" + e.name + "' is not a valid name (letters, digits, '_'; not a keyword)");
    }
    if (slots.count(e.name)) throw std::invalid_argument("layout: duplicate name '" + e.name + "'");
    if (e.length < 1 || e.length > 3) {
      throw std::invalid_argument("layout['" + e.name + "']: length must be 1, 2 or 3, got " +
                                  std::to_string(e.length));
    }
    if (e.offset < 0 || e.offset > (1 << 30)) {
      throw std::invalid_argument("layout['" + e.name + "']: offset must be in [0, 2**30], got " +
                                  std::to_string(e.offset));
    }
    slots[e.name] = LayoutSlot{static_cast<int>(e.offset), static_cast<Type>(e.length)};
    required = std::max(required, static_cast<std::size_t>(e.offset + e.length));
  }
  if (source.size() > limits.max_source_bytes) {
    throw PotentialError(1, 1, "the source is too large (" + std::to_string(source.size()) + " bytes; the limit is " +
                                   std::to_string(limits.max_source_bytes) + ")");
  }
  Parser parser(source, lex(source), slots, limits);
  const auto parsed = parser.parse_program();
  CodeGen gen(parser.nodes());
  PotentialProgram prog;
  prog.source_ = source;
  prog.layout_ = layout;
  prog.required_dim_ = required;
  for (const auto& st : parsed) {
    PotentialStageCode code;
    code.name = st.name;
    code.progress_source = st.progress.source;
    code.done_source = st.done.source;
    code.progress = gen.compile(st.progress.root);
    code.done = gen.compile(st.done.root);
    prog.stages_.push_back(std::move(code));
  }
  // Relocate: [temporaries | constants | slots].
  prog.const_base_ = gen.num_temps();
  prog.constants_ = gen.constants();
  prog.slot_base_ = prog.const_base_ + static_cast<std::uint32_t>(prog.constants_.size());
  prog.slot_index_ = gen.slots();
  auto reloc = [&prog](std::uint32_t& r) {
    const std::uint32_t tag = r & kTagMask, k = r & ~kTagMask;
    if (tag == kConstTag) r = prog.const_base_ + k;
    if (tag == kSlotTag) r = prog.slot_base_ + k;
  };
  for (auto& st : prog.stages_) {
    for (PotentialExprCode* e : {&st.progress, &st.done}) {
      reloc(e->result);
      for (auto& in : e->code) {
        reloc(in.dst);
        reloc(in.a);
        reloc(in.b);
      }
    }
  }
  return prog;
}

}  // namespace coda_core
