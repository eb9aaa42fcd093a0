// llama-capture: one llama_decode of a GGUF model through llama.cpp, with an
// eval callback that sees every node the scheduler computes, written down as
// JSON for ggplan to import and to compare its own decisions with.
//
//   llama-capture MODEL.gguf OUT.json [--tokens N] [--prompt TEXT] [--ctx C]
//                 [-ngl N] [-sm none|layer|row|tensor] [-ts A,B,...] [--rpc H:P,...]
//                 [-ot REGEX=BUFFER,...] [-fa on|off|auto] [-ctk T] [-ctv T] [-t N]
//                 [--greedy N] [--last-logits] [-v]
//
// Writes OUT.json (format "ggplan-llama-capture", version 1) and the logits of
// every token beside it (OUT.logits.npy, float32 [n_tokens, n_vocab]; with
// --last-logits the batch asks for the last token's only, as llama-cli and
// llama-bench do, and the graph selects that row by `inp_out_ids`: [1, n_vocab]):
//   tokens, positions   what was decoded (the prompt's tokens, or N ids)
//   tensors             every tensor the graph reaches: name, op, type, ne,
//                       nb, op_params (16 int32 words), flags, sources,
//                       view source and offset, the buffer type it lives in,
//                       a graph input's values (bytes in hex, as llama.cpp
//                       set them: tokens, positions, mask, cache rows; a
//                       scheduler copy's as it was copied),
//                       and for a scheduler input copy ("BACKEND#name#k")
//                       the tensor it copies (a graph input only its copies
//                       reach gets an entry of its own, "reconstructed")
//   nodes               the nodes in the order the scheduler computed them
//   splits              runs of consecutive nodes in one backend's buffers,
//                       with the input copies they read
//   copies              every input copy: backend, bytes, original
//   reserve             llama.cpp's own log of its reservation: compute
//                       buffer MiB per buffer type and its graph line
//                       (nodes, splits for prompt and generation batches)
//   greedy              with --greedy N only: the N tokens llama.cpp then
//                       decodes one at a time, each the argmax of the logits
//                       before it (the callback records none of those decodes)
// -ctk/-ctv set the KV cache types (f32, f16, q8_0; llama.cpp's default f16).
// Errors (a bad model, bad flags) are llama.cpp's or this tool's message on
// stderr and exit 1; nothing is written then.

#include "ggml-backend.h"
#include "ggml-rpc.h"
#include "ggml.h"
#include "llama.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---- JSON output --------------------------------------------------------

std::string json_string(const std::string & s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += (char) c;
                }
        }
    }
    return out + "\"";
}

template <typename T> std::string json_array(const T * values, size_t n) {
    std::ostringstream out;
    out << "[";
    for (size_t i = 0; i < n; i++) {
        out << (i ? "," : "") << values[i];
    }
    out << "]";
    return out.str();
}

// A scheduler input copy is named BACKEND#ORIGINAL#K: BACKEND and ORIGINAL.
bool split_copy_name(const std::string & name, std::string & backend, std::string & original) {
    size_t first = name.find('#');
    size_t last = name.rfind('#');
    if (first == std::string::npos || first == last) {
        return false;
    }
    backend = name.substr(0, first);
    original = name.substr(first + 1, last - first - 1);
    return true;
}

// ---- What the eval callback records ---------------------------------------

struct Capture {
    std::map<const ggml_tensor *, int> ids;  // tensor -> index in `tensors`
    std::vector<const ggml_tensor *> tensors;
    std::vector<int> nodes;                  // ids, in compute order
    std::vector<char> is_node;
    std::map<int, std::string> input_bytes;  // graph inputs' values, by id
    // Originals no node reads (graph inputs reached only through their
    // copies): name, one copy, the backends with a copy; ids follow `tensors`.
    struct Reconstructed {
        std::string name;
        const ggml_tensor * copy;
        std::set<std::string> backends;
    };
    std::vector<Reconstructed> reconstructed;
    std::map<int, int> original_of;          // copy id -> original id
    bool closed = false;                     // the captured decode is over
    std::set<const ggml_tensor *> visiting;  // id_of's walk, to refuse a cycle

    // Maps every scheduler copy (BACKEND#NAME#K) to the tensor it copies.
    // A computed original is the last tensor of that name before the copy.
    // A graph input no node reads directly gets an entry of its own; names
    // repeat (Gemma 3's window and global masks), so copies share an
    // original only if their values are equal and their backends differ
    // (the scheduler copies an original once per backend).
    void map_copies() {
        static const std::string none;
        auto bytes_of = [&](int id) -> const std::string & {
            auto found = input_bytes.find(id);
            return found == input_bytes.end() ? none : found->second;
        };
        for (size_t id = 0; id < tensors.size(); id++) {
            std::string backend, name;
            if (!split_copy_name(tensors[id]->name, backend, name)) {
                continue;
            }
            int computed = -1;
            for (size_t j = 0; j < id; j++) {
                std::string b, n;
                if (tensors[j]->name == name && !split_copy_name(tensors[j]->name, b, n)) {
                    computed = (int) j;
                }
            }
            if (computed >= 0) {
                original_of[(int) id] = computed;
                continue;
            }
            const std::string & bytes = bytes_of((int) id);
            size_t k = 0;
            for (; k < reconstructed.size(); k++) {
                const Reconstructed & r = reconstructed[k];
                if (r.name == name && bytes_of(ids.at(r.copy)) == bytes && r.backends.count(backend) == 0) {
                    break;
                }
            }
            if (k == reconstructed.size()) {
                reconstructed.push_back({name, tensors[id], {}});
            }
            reconstructed[k].backends.insert(backend);
            original_of[(int) id] = (int) (tensors.size() + k);
        }
    }

    int id_of(const ggml_tensor * t) {
        auto found = ids.find(t);
        if (found != ids.end()) {
            return found->second;
        }
        if (!visiting.insert(t).second) {
            throw std::runtime_error(std::string("tensor '") + t->name + "' (" + ggml_op_name(t->op) +
                                     ") is among its own sources");
        }
        // Sources and the view source first, so every reference points back.
        if (t->view_src) {
            id_of(t->view_src);
        }
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            // ggml_cast's CPY names itself as its destination (src[1]).
            if (t->src[j] && t->src[j] != t) {
                id_of(t->src[j]);
            }
        }
        visiting.erase(t);
        int id = (int) tensors.size();
        ids[t] = id;
        tensors.push_back(t);
        is_node.push_back(0);
        return id;
    }
};

// Reads the values of the graph inputs among `t`'s sources: llama.cpp has
// set them (and copied them to the backend that reads them) before it asks
// about the first node that reads them.
void read_inputs(Capture & c, const ggml_tensor * t) {
    for (int j = 0; j < GGML_MAX_SRC; j++) {
        const ggml_tensor * src = t->src[j];
        // A packed scheduler copy is read too: with buffer overrides (-ot)
        // llama.cpp may leave the copies of its inputs unflagged, and a copy
        // is then where an input's values are seen.
        std::string backend, original;
        const bool copy = src && ggml_is_contiguous(src) && split_copy_name(src->name, backend, original);
        if (!src || !((src->flags & GGML_TENSOR_FLAG_INPUT) || copy) || src->view_src || !src->buffer) {
            continue;
        }
        int id = c.id_of(src);
        if (c.input_bytes.count(id) == 0) {
            std::string bytes(ggml_nbytes(src), '\0');
            ggml_backend_tensor_get(src, bytes.data(), 0, bytes.size());
            c.input_bytes[id] = std::move(bytes);
        }
    }
}

// Asked once per node, in the order the scheduler computes them. Answering
// "not wanted" keeps each split's nodes in one computation, as without us.
bool on_node(ggml_tensor * t, bool ask, void * user) {
    auto * capture = static_cast<Capture *>(user);
    if (ask && !capture->closed) {
        int id = capture->id_of(t);
        if (!capture->is_node[id]) {
            capture->is_node[id] = 1;
            capture->nodes.push_back(id);
        }
        read_inputs(*capture, t);
    }
    return false;
}

std::string hex(const std::string & bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) {
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

// `,"data_hex":"..."` for a graph input or scheduler copy whose values were
// read (empty else).
std::string data_field(const Capture & c, int id) {
    auto found = c.input_bytes.find(id);
    return found == c.input_bytes.end() ? "" : ",\"data_hex\":\"" + hex(found->second) + "\"";
}

std::string buffer_of(const ggml_tensor * t) {
    const ggml_backend_buffer_t buffer = t->view_src ? t->view_src->buffer : t->buffer;
    if (!buffer) {
        return "";
    }
    return ggml_backend_buft_name(ggml_backend_buffer_get_type(buffer));
}

// ---- llama.cpp's log ------------------------------------------------------

struct LogSink {
    bool verbose = false;
    std::vector<std::string> reserve; // compute buffer and graph lines
    std::string line;
};

void on_log(ggml_log_level level, const char * text, void * user) {
    auto * sink = static_cast<LogSink *>(user);
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN || sink->verbose) {
        fputs(text, stderr);
    }
    sink->line += text;
    size_t end;
    while ((end = sink->line.find('\n')) != std::string::npos) {
        std::string line = sink->line.substr(0, end);
        sink->line.erase(0, end + 1);
        if (line.find("compute buffer size =") != std::string::npos ||
            line.find(": graph") != std::string::npos) {
            size_t start = line.find_first_not_of(' ');
            sink->reserve.push_back(line.substr(start == std::string::npos ? 0 : start));
        }
    }
}

// ---- Flags ----------------------------------------------------------------

std::vector<std::string> split_list(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, sep)) {
        out.push_back(item);
    }
    return out;
}

[[noreturn]] void usage_error(const std::string & what) {
    fprintf(stderr, "llama-capture: %s\n", what.c_str());
    fprintf(stderr,
            "usage: llama-capture MODEL.gguf OUT.json [--tokens N] [--prompt TEXT] [--ctx C]\n"
            "       [-ngl N] [-sm none|layer|row|tensor] [-ts A,B,...] [--rpc HOST:PORT,...]\n"
            "       [-ot REGEX=BUFFER,...] [-fa on|off|auto] [-ctk T] [-ctv T] [-t N]\n"
            "       [--greedy N] [--last-logits] [-v]\n");
    exit(1);
}

int parse_int(const std::string & flag, const std::string & value) {
    char * end = nullptr;
    long v = strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < -1 || v > (1 << 30)) {
        usage_error(flag + " needs an integer, got '" + value + "'");
    }
    return (int) v;
}

struct Options {
    std::string model, out, prompt;
    int tokens = 0, ctx = 0, threads = 0, greedy = 0;
    bool verbose = false;
    bool last_logits = false;
    llama_model_params mparams = llama_model_default_params();
    llama_context_params cparams = llama_context_default_params();
    std::vector<float> tensor_split;
    std::vector<std::string> override_patterns; // kept alive for mparams
    std::vector<llama_model_tensor_buft_override> overrides;
    std::vector<std::string> args;              // as given, for the record
};

ggml_backend_buffer_type_t buffer_type_named(const std::string & name) {
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(ggml_backend_dev_get(i));
        if (name == ggml_backend_buft_name(buft)) {
            return buft;
        }
    }
    std::string known;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        known += std::string(i ? ", " : "") +
                 ggml_backend_buft_name(ggml_backend_dev_buffer_type(ggml_backend_dev_get(i)));
    }
    usage_error("-ot: no buffer type '" + name + "' (known: " + known + ")");
}

ggml_type cache_type(const std::string & flag, const std::string & v) {
    if (v == "f32") return GGML_TYPE_F32;
    if (v == "f16") return GGML_TYPE_F16;
    if (v == "q8_0") return GGML_TYPE_Q8_0;
    usage_error(flag + ": expected f32, f16 or q8_0, got '" + v + "'");
}

Options parse(int argc, char ** argv) {
    Options o;
    std::vector<std::string> positional;
    std::vector<std::string> ot;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        o.args.push_back(a);
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage_error(a + " needs a value");
            }
            o.args.push_back(argv[i + 1]);
            return argv[++i];
        };
        if (a == "--tokens" || a == "-n") {
            o.tokens = parse_int(a, value());
        } else if (a == "--prompt" || a == "-p") {
            o.prompt = value();
        } else if (a == "--ctx" || a == "-c") {
            o.ctx = parse_int(a, value());
        } else if (a == "-ngl" || a == "--n-gpu-layers") {
            o.mparams.n_gpu_layers = parse_int(a, value());
        } else if (a == "-sm" || a == "--split-mode") {
            std::string v = value();
            if (v == "none") o.mparams.split_mode = LLAMA_SPLIT_MODE_NONE;
            else if (v == "layer") o.mparams.split_mode = LLAMA_SPLIT_MODE_LAYER;
            else if (v == "row") o.mparams.split_mode = LLAMA_SPLIT_MODE_ROW;
            else if (v == "tensor") o.mparams.split_mode = LLAMA_SPLIT_MODE_TENSOR;
            else usage_error("-sm: unknown split mode '" + v + "'");
        } else if (a == "-ts" || a == "--tensor-split") {
            for (const auto & part : split_list(value(), ',')) {
                o.tensor_split.push_back(strtof(part.c_str(), nullptr));
            }
        } else if (a == "--rpc") {
            for (const auto & endpoint : split_list(value(), ',')) {
                ggml_backend_register(ggml_backend_rpc_add_server(endpoint.c_str()));
            }
        } else if (a == "-ot" || a == "--override-tensor") {
            for (const auto & part : split_list(value(), ',')) {
                ot.push_back(part);
            }
        } else if (a == "-fa" || a == "--flash-attn") {
            std::string v = value();
            if (v == "on") o.cparams.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (v == "off") o.cparams.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else if (v == "auto") o.cparams.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else usage_error("-fa: expected on, off or auto, got '" + v + "'");
        } else if (a == "-ctk" || a == "--cache-type-k") {
            o.cparams.type_k = cache_type(a, value());
        } else if (a == "-ctv" || a == "--cache-type-v") {
            o.cparams.type_v = cache_type(a, value());
        } else if (a == "--greedy") {
            o.greedy = parse_int(a, value());
        } else if (a == "-t" || a == "--threads") {
            o.threads = parse_int(a, value());
        } else if (a == "-v") {
            o.verbose = true;
        } else if (a == "--last-logits") {
            o.last_logits = true;
        } else if (!a.empty() && a[0] == '-') {
            usage_error("unknown flag " + a);
        } else {
            positional.push_back(a);
        }
    }
    if (positional.size() != 2) {
        usage_error("expected MODEL.gguf and OUT.json");
    }
    o.model = positional[0];
    o.out = positional[1];
    if (o.tokens <= 0 && o.prompt.empty()) {
        usage_error("give --tokens N (N > 0) or --prompt TEXT");
    }
    // -ot needs the devices, which --rpc may have added above.
    for (const auto & part : ot) {
        size_t eq = part.rfind('=');
        if (eq == std::string::npos || eq == 0) {
            usage_error("-ot: expected REGEX=BUFFER, got '" + part + "'");
        }
        o.override_patterns.push_back(part.substr(0, eq));
        o.overrides.push_back({nullptr, buffer_type_named(part.substr(eq + 1))});
    }
    if (!o.overrides.empty()) {
        for (size_t i = 0; i < o.overrides.size(); i++) {
            o.overrides[i].pattern = o.override_patterns[i].c_str();
        }
        o.overrides.push_back({nullptr, nullptr});
        o.mparams.tensor_buft_overrides = o.overrides.data();
    }
    if (!o.tensor_split.empty()) {
        if (o.tensor_split.size() > llama_max_devices()) {
            usage_error("-ts: more proportions than devices");
        }
        o.tensor_split.resize(llama_max_devices(), 0.0f);
        o.mparams.tensor_split = o.tensor_split.data();
    }
    return o;
}

// ---- Files ----------------------------------------------------------------

// Writes `text` to `path` through a temporary file, so a failure leaves no
// half-written output.
void write_file(const std::string & path, const std::string & bytes) {
    std::string tmp = path + ".partial";
    FILE * f = fopen(tmp.c_str(), "wb");
    if (!f || fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || fclose(f) != 0) {
        remove(tmp.c_str());
        throw std::runtime_error("cannot write " + path);
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        remove(tmp.c_str());
        throw std::runtime_error("cannot write " + path);
    }
}

std::string npy_f32(const std::vector<float> & data, size_t rows, size_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(rows) + ", " + std::to_string(cols) + "), }";
    // Magic, version, header length; the header padded to a multiple of 64.
    size_t total = 10 + header.size() + 1;
    header += std::string((64 - total % 64) % 64, ' ') + "\n";
    std::string out("\x93NUMPY\x01\x00", 8);
    uint16_t len = (uint16_t) header.size();
    out += (char) (len & 0xff);
    out += (char) (len >> 8);
    out += header;
    out.append(reinterpret_cast<const char *>(data.data()), data.size() * sizeof(float));
    return out;
}

std::string tensor_json(const Capture & c, int id) {
    const ggml_tensor * t = c.tensors[id];
    std::ostringstream o;
    o << "{\"id\":" << id << ",\"name\":" << json_string(t->name)
      << ",\"op\":" << json_string(ggml_op_name(t->op)) << ",\"desc\":" << json_string(ggml_op_desc(t))
      << ",\"type\":" << json_string(ggml_type_name(t->type))
      << ",\"ne\":" << json_array(t->ne, GGML_MAX_DIMS) << ",\"nb\":" << json_array(t->nb, GGML_MAX_DIMS)
      << ",\"op_params\":" << json_array(t->op_params, GGML_MAX_OP_PARAMS / sizeof(int32_t))
      << ",\"flags\":" << t->flags << ",\"src\":[";
    bool first = true;
    for (int j = 0; j < GGML_MAX_SRC; j++) {
        if (t->src[j]) {
            o << (first ? "" : ",") << c.ids.at(t->src[j]);
            first = false;
        }
    }
    o << "]";
    if (t->view_src) {
        o << ",\"view_src\":" << c.ids.at(t->view_src) << ",\"view_offs\":" << t->view_offs;
    }
    o << ",\"buffer\":" << json_string(buffer_of(t)) << ",\"node\":" << (c.is_node[id] ? "true" : "false");
    std::string backend, original;
    if (split_copy_name(t->name, backend, original)) {
        o << ",\"copy_of\":" << c.original_of.at(id);
    }
    o << data_field(c, id) << "}";
    return o.str();
}

// A graph input that only its copies reach (the scheduler set it on the CPU
// and copied it to the device that reads it): an entry of the copy's type
// and shape, its buffer unknown, marked as reconstructed.
std::string reconstructed_json(const Capture & c, size_t k) {
    const std::string & name = c.reconstructed[k].name;
    const ggml_tensor * copy = c.reconstructed[k].copy;
    std::ostringstream o;
    o << "{\"id\":" << c.tensors.size() + k << ",\"name\":" << json_string(name)
      << ",\"op\":\"NONE\",\"desc\":\"NONE\",\"type\":" << json_string(ggml_type_name(copy->type))
      << ",\"ne\":" << json_array(copy->ne, GGML_MAX_DIMS) << ",\"nb\":" << json_array(copy->nb, GGML_MAX_DIMS)
      << ",\"op_params\":" << json_array(copy->op_params, GGML_MAX_OP_PARAMS / sizeof(int32_t))
      << ",\"flags\":" << (copy->flags & GGML_TENSOR_FLAG_INPUT)
      << ",\"src\":[],\"buffer\":\"\",\"node\":false,\"reconstructed\":true"
      << data_field(c, c.ids.at(copy)) << "}";
    return o.str();
}

// The capture's JSON object without its closing brace (the greedy tokens,
// decoded later, may follow). Reads the graph's tensors: call it before any
// other decode rebuilds them.
std::string capture_json(const Options & opt, const Capture & c, const std::vector<llama_token> & tokens,
                         const LogSink & log, const std::string & arch, int n_vocab, uint32_t n_ctx) {
    std::ostringstream o;
    o << "{\n\"format\":\"ggplan-llama-capture\",\n\"version\":1,\n\"model\":" << json_string(opt.model)
      << ",\n\"architecture\":" << json_string(arch) << ",\n\"args\":[";
    for (size_t i = 0; i < opt.args.size(); i++) {
        o << (i ? "," : "") << json_string(opt.args[i]);
    }
    o << "],\n\"n_vocab\":" << n_vocab << ",\n\"n_ctx\":" << n_ctx << ",\n\"tokens\":" << json_array(tokens.data(), tokens.size())
      << ",\n\"positions\":[";
    for (size_t i = 0; i < tokens.size(); i++) {
        o << (i ? "," : "") << i;
    }
    o << "],\n\"logits\":{\"file\":" << json_string(opt.out.substr(opt.out.rfind('/') + 1) + ".logits.npy")
      << ",\"shape\":[" << (opt.last_logits ? 1 : tokens.size()) << "," << n_vocab << "]},\n\"tensors\":[\n";
    for (size_t id = 0; id < c.tensors.size(); id++) {
        o << (id ? ",\n" : "") << tensor_json(c, (int) id);
    }
    for (size_t k = 0; k < c.reconstructed.size(); k++) {
        o << ",\n" << reconstructed_json(c, k);
    }
    o << "\n],\n\"nodes\":" << json_array(c.nodes.data(), c.nodes.size()) << ",\n\"splits\":[";
    // A split: consecutive nodes whose outputs live in one backend's buffers.
    size_t start = 0;
    bool first_split = true;
    for (size_t k = 1; k <= c.nodes.size(); k++) {
        std::string here = buffer_of(c.tensors[c.nodes[start]]);
        if (k < c.nodes.size() && buffer_of(c.tensors[c.nodes[k]]) == here) {
            continue;
        }
        std::vector<int> inputs;
        for (size_t n = start; n < k; n++) {
            const ggml_tensor * t = c.tensors[c.nodes[n]];
            for (int j = 0; j < GGML_MAX_SRC; j++) {
                std::string b, orig;
                if (t->src[j] && split_copy_name(t->src[j]->name, b, orig)) {
                    int id = c.ids.at(t->src[j]);
                    bool seen = false;
                    for (int x : inputs) seen |= x == id;
                    if (!seen) inputs.push_back(id);
                }
            }
        }
        o << (first_split ? "\n" : ",\n") << "{\"buffer\":" << json_string(here) << ",\"first\":" << start
          << ",\"end\":" << k << ",\"inputs\":" << json_array(inputs.data(), inputs.size()) << "}";
        first_split = false;
        start = k;
    }
    o << "\n],\n\"copies\":[";
    bool first_copy = true;
    for (size_t id = 0; id < c.tensors.size(); id++) {
        std::string backend, original;
        const ggml_tensor * t = c.tensors[id];
        if (split_copy_name(t->name, backend, original)) {
            o << (first_copy ? "\n" : ",\n") << "{\"tensor\":" << id << ",\"backend\":" << json_string(backend)
              << ",\"original\":" << json_string(original) << ",\"bytes\":" << ggml_nbytes(t) << "}";
            first_copy = false;
        }
    }
    o << "\n],\n\"reserve\":[";
    for (size_t i = 0; i < log.reserve.size(); i++) {
        o << (i ? "," : "") << "\n" << json_string(log.reserve[i]);
    }
    o << "\n]";
    return o.str();
}

int run(int argc, char ** argv) {
    static LogSink log;
    for (int i = 1; i < argc; i++) {
        log.verbose |= std::strcmp(argv[i], "-v") == 0;
    }
    llama_log_set(on_log, &log);
    llama_backend_init();
    Options opt = parse(argc, argv);

    llama_model * model = llama_model_load_from_file(opt.model.c_str(), opt.mparams);
    if (!model) {
        throw std::runtime_error("llama.cpp could not load " + opt.model);
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    char arch[128] = "";
    llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch);

    std::vector<llama_token> tokens;
    if (!opt.prompt.empty()) {
        int n = -llama_tokenize(vocab, opt.prompt.c_str(), (int) opt.prompt.size(), nullptr, 0,
                                llama_vocab_get_add_bos(vocab), false);
        tokens.resize(n);
        llama_tokenize(vocab, opt.prompt.c_str(), (int) opt.prompt.size(), tokens.data(), n,
                       llama_vocab_get_add_bos(vocab), false);
        if (opt.tokens > 0) {
            if ((int) tokens.size() < opt.tokens) {
                throw std::runtime_error("the prompt has " + std::to_string(tokens.size()) +
                                         " tokens, fewer than --tokens " + std::to_string(opt.tokens));
            }
            tokens.resize(opt.tokens);
        }
    } else {
        // Ids spread over the vocabulary, the same on every run.
        for (int i = 0; i < opt.tokens; i++) {
            tokens.push_back((llama_token) ((17 + 7919LL * i) % n_vocab));
        }
    }

    Capture capture;
    opt.cparams.cb_eval = on_node;
    opt.cparams.cb_eval_user_data = &capture;
    const uint32_t needed = (uint32_t) (tokens.size() + std::max(opt.greedy, 0));
    opt.cparams.n_ctx = opt.ctx > 0 ? (uint32_t) opt.ctx : std::max<uint32_t>(256, needed);
    opt.cparams.n_batch = std::max<uint32_t>(opt.cparams.n_batch, (uint32_t) tokens.size());
    opt.cparams.n_ubatch = opt.cparams.n_batch;
    opt.cparams.no_perf = true;
    if (opt.threads > 0) {
        opt.cparams.n_threads = opt.cparams.n_threads_batch = opt.threads;
    }
    llama_context * ctx = llama_init_from_model(model, opt.cparams);
    if (!ctx) {
        llama_model_free(model);
        throw std::runtime_error("llama.cpp could not create a context for " + opt.model);
    }
    // Reserving the context ran the callback on nothing (no compute); what
    // it may have seen is dropped, so the capture holds this decode alone.
    capture = Capture();

    llama_batch batch = llama_batch_init((int32_t) tokens.size(), 0, 1);
    for (size_t i = 0; i < tokens.size(); i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = (llama_pos) i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = !opt.last_logits || i + 1 == tokens.size();
    }
    batch.n_tokens = (int32_t) tokens.size();
    int status = llama_decode(ctx, batch);
    if (status != 0) {
        llama_batch_free(batch);
        llama_free(ctx);
        llama_model_free(model);
        throw std::runtime_error("llama_decode failed with status " + std::to_string(status));
    }
    std::vector<float> logits;
    logits.reserve(tokens.size() * (size_t) n_vocab);
    for (size_t i = opt.last_logits ? tokens.size() - 1 : 0; i < tokens.size(); i++) {
        const float * row = llama_get_logits_ith(ctx, (int32_t) i);
        logits.insert(logits.end(), row, row + n_vocab);
    }
    capture.map_copies();
    std::string json = capture_json(opt, capture, tokens, log, arch, n_vocab, llama_n_ctx(ctx));
    capture.closed = true;
    std::vector<llama_token> greedy;
    for (int k = 0; k < opt.greedy; k++) {
        const float * row = llama_get_logits_ith(ctx, -1);
        llama_token next = (llama_token) (std::max_element(row, row + n_vocab) - row);
        greedy.push_back(next);
        if (k + 1 == opt.greedy) {
            break;
        }
        llama_batch one = llama_batch_get_one(&greedy.back(), 1);
        if (llama_decode(ctx, one) != 0) {
            throw std::runtime_error("llama_decode failed on greedy token " + std::to_string(k + 1));
        }
    }
    if (opt.greedy > 0) {
        json += ",\n\"greedy\":" + json_array(greedy.data(), greedy.size());
    }
    json += "\n}\n";
    write_file(opt.out + ".logits.npy", npy_f32(logits, logits.size() / (size_t) n_vocab, (size_t) n_vocab));
    write_file(opt.out, json);
    fprintf(stderr, "llama-capture: %zu tokens, %zu tensors, %zu nodes, %zu copies -> %s\n", tokens.size(),
            capture.tensors.size(), capture.nodes.size(),
            (size_t) std::count_if(capture.tensors.begin(), capture.tensors.end(),
                                   [](const ggml_tensor * t) { return std::strchr(t->name, '#') != nullptr; }),
            opt.out.c_str());
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception & e) {
        fprintf(stderr, "llama-capture: %s\n", e.what());
        return 1;
    }
}
