// test_docs.cpp: docs/walkthrough.md names the code it walks through as `file:function`; every
// such reference must still exist (the file, and the function name followed by "(" in it), so
// the walkthrough cannot rot when code moves or is renamed.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "common.h"

namespace {

TEST(Walkthrough, EveryFileFunctionItNamesExists) {
    const std::string doc = olmo::read_file("docs/walkthrough.md");
    const std::regex ref(R"(`((?:src|kernels)/[A-Za-z0-9_./]+\.(?:cpp|cu|cuh|h)):([A-Za-z_][A-Za-z0-9_]*)`)");
    int checked = 0;
    for (auto it = std::sregex_iterator(doc.begin(), doc.end(), ref); it != std::sregex_iterator(); ++it) {
        const std::string file = (*it)[1], function = (*it)[2];
        checked++;
        if (!olmo::file_exists(file)) {
            ADD_FAILURE() << "docs/walkthrough.md names " << file << ", which does not exist";
            continue;
        }
        EXPECT_NE(olmo::read_file(file).find(function + "("), std::string::npos)
            << "docs/walkthrough.md names " << file << ":" << function << ", but " << file << " has no " << function << "(";
    }
    EXPECT_GE(checked, 30) << "the walkthrough should name the code of every step";
    printf("  %d file:function references checked\n", checked);
}

}  // namespace
