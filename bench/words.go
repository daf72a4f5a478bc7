package bench

import "strings"

// wordTable holds common English words, each exactly one token with a
// leading space in o200k_base (checked by TestWordsAreSingleTokens) and in
// most BPE vocabularies of that family, so a prompt of n words is close to n
// tokens on any OpenAI-compatible server and exactly n on tandem-mock. The
// seed's experiments sized prompts in words; keeping words ≈ tokens makes
// their figures comparable.
//
// It is a constant of fixed-width, space-padded entries rather than a
// []string so that it is immutable and indexing it allocates nothing.
const wordTable = "" +
	"time        year        people      way         day         man         thing       " +
	"woman       life        child       world       school      state       family      " +
	"student     group       country     problem     hand        part        place       " +
	"case        week        company     system      program     question    work        " +
	"government  number      night       point       home        water       room        " +
	"mother      area        money       story       fact        month       lot         " +
	"right       study       book        eye         job         word        business    " +
	"issue       side        kind        head        house       service     friend      " +
	"father      power       hour        game        line        end         member      " +
	"law         car         city        community   name        president   team        " +
	"minute      idea        kid         body        information back        parent      " +
	"face        others      level       office      door        health      person      " +
	"art         war         history     party       result      change      morning     " +
	"reason      research    girl        guy         moment      air         teacher     " +
	"force       education   foot        boy         age         policy      music       " +
	"market      sense       nation      plan        college     interest    death       " +
	"experience  effect      use         class       control     care        field       " +
	"development role        effort      rate        heart       drug        show        " +
	"leader      light       voice       wife        police      mind        price       " +
	"report      decision    son         view        relationshiptown        road        " +
	"arm         difference  value       building    action      model       season      " +
	"society     tax         director    position    player      record      paper       " +
	"space       ground      form        event       official    matter      center      " +
	"couple      site        project     activity    star        table       need        " +
	"court       oil         situation   cost        industry    figure      street      " +
	"image       phone       data        picture     practice    piece       land        " +
	"product     doctor      wall        patient     worker      news        test        " +
	"movie       north       love        support     technology  step        baby        " +
	"computer    type        attention   film        tree        source      organization" +
	"hair        window      evidence    population  truth       song        river       " +
	"lake        stone       garden      bread       horse       bird        apple       " +
	"ocean       island      forest      mountain    valley      bridge      train       " +
	"plane       ship        boat        engine      wheel       glass       metal       " +
	"wood        cotton      silver      gold        iron        steel       copper      " +
	"salt        sugar       milk        coffee      tea         wine        beer        " +
	"cheese      butter      rice        corn        bean        fruit       orange      " +
	"lemon       grape       cherry      peach       plant       flower      grass       " +
	"leaf        root        seed        farm        village     castle      church      " +
	"temple      tower       shop        bank        hotel       hospital    library     " +
	"museum      theater     station     airport     harbor      beach       desert      " +
	"planet      moon        sun         cloud       rain        snow        wind        " +
	"storm       thunder     winter      summer      spring      autumn      evening     " +
	"dinner      lunch       breakfast   kitchen     bedroom     floor       roof        " +
	"chair       desk        lamp        clock       mirror      camera      radio       " +
	"letter      message     signal      answer      method      theory      science     " +
	"nature      animal      dog         cat         fish        mouse       lion        " +
	"tiger       bear        wolf        fox         rabbit      snake       eagle       " +
	"whale       shark       dragon      king        queen       prince      soldier     " +
	"captain     pilot       driver      farmer      artist      writer      singer      " +
	"dancer      lawyer      judge       nurse       chef        baker       hunter      " +
	"sailor      red         blue        green       yellow      black       white       " +
	"brown       gray        purple      pink        dark        bright      quiet       " +
	"loud        soft        hard        warm        cold        hot         cool        " +
	"fresh       clean       simple      strong      weak        fast        slow        " +
	"early       late        young       old         new         small       large       " +
	"big         long        short       high        low         deep        wide        " +
	"narrow      heavy       rich        poor        happy       sad         brave       " +
	"calm        wild        gentle      proud       honest      clever      strange     " +
	"famous      rare        common      ancient     modern      golden      silent      " +
	"hidden      open        free        full        empty       round       sharp       " +
	"smooth      rough       sweet       bitter      final       central     local       " +
	"public      private     social      natural     human       national    general     " +
	"special     certain     clear       whole       true        real        major       " +
	"basic       recent      similar     political   economic    medical     physical    " +
	"financial   personal    serious     popular     legal       ready       able        " +
	"run         walk        jump        swim        fly         climb       read        " +
	"write       sing        dance       play        build       make        take        " +
	"give        find        keep        hold        turn        move        live        " +
	"grow        learn       teach       speak       listen      watch       look        " +
	"see         hear        feel        think       know        believe     remember    " +
	"forget      begin       start       stop        finish      close       carry       " +
	"bring       send        buy         sell        pay         win         lose        " +
	"hide        seek        follow      lead        travel      visit       return      " +
	"arrive      leave       stay        wait        rest        sleep       wake        " +
	"dream       hope        wish        laugh       smile       cry         shout       " +
	"call        ask         tell        explain     describe    discuss     decide      " +
	"choose      agree       allow       offer       serve       cover       cross       " +
	"cut         draw        drive       fill        fix         join        kill        " +
	"lift        pull        push        raise       reach       save        share       " +
	"shoot       sit         stand       touch       throw       try         wear        " +
	"wash        count       cook        paint       pick        print       "

const (
	wordWidth = 12
	numWords  = len(wordTable) / wordWidth
)

// word returns entry i of wordTable.
func word(i int) string {
	return strings.TrimRight(wordTable[i*wordWidth:(i+1)*wordWidth], " ")
}

// appendWords appends n words drawn from r, each preceded by a space
// unless it starts the builder.
func appendWords(sb *strings.Builder, r *rng, n int) {
	for i := 0; i < n; i++ {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(word(r.intn(numWords)))
	}
}

// words returns n words drawn from r.
func words(r *rng, n int) string {
	var sb strings.Builder
	sb.Grow(n * 7)
	appendWords(&sb, r, n)
	return sb.String()
}
